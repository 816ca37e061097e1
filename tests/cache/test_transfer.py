"""Fetching a shard (ShardStream, made by CachedStore.stream): a blob arriving from a store is
handed over only in verified chunks."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest

import rayform
from rayform.cache import transfer as shardstream
from rayform.errors import IntegrityError

CHUNK = 4096


@pytest.mark.parametrize("read_size", [CHUNK, 1000, 3 * CHUNK + 17], ids=["one chunk a read", "short reads",
                                                                          "reads across chunks"])
@pytest.mark.parametrize("bad_chunk", [None, 0, 2, 3])
def test_only_verified_chunks_are_handed_over(tmp_path, monkeypatch, read_size, bad_chunk):
    monkeypatch.setattr(shardstream, "STREAM_CHUNK", read_size)
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    store = rayform.Client(f"memory://stream-{uuid.uuid4().hex[:8]}").store
    good = os.urandom(3 * CHUNK + 1234)  # the last chunk is short
    digest = store.put_blob(good)
    chunks = b"".join(hashlib.sha256(good[i:i + CHUNK]).digest() for i in range(0, len(good), CHUNK))
    stored = bytearray(good)
    if bad_chunk is not None:
        stored[bad_chunk * CHUNK + 7] ^= 0x01
        store.backend.fs.pipe_file(store.backend.blob_path(digest), bytes(stored))
    stream = store.stream(digest, len(good), "shard 0", chunks=chunks, chunk_bytes=CHUNK)
    got = b""
    try:
        if bad_chunk is None:
            while part := stream.read(777):
                got += part
            stream.finish()
            assert got == good and store.cache.has(digest)
        else:
            with pytest.raises(IntegrityError, match=f"chunk {bad_chunk} "):
                while part := stream.read(777):
                    got += part
            # bytes before the bad chunk only (the read that met the error drops its part), none of it or after
            assert good.startswith(got) and bad_chunk * CHUNK - 777 < len(got) <= bad_chunk * CHUNK
            assert not store.cache.has(digest)
    finally:
        stream.close()
