"""A blob arriving from a store (``Transfer``): only verified chunks are handed on, a bad one
stops it there, and nothing of a bad blob is kept in the cache."""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest

import rayform
from rayform.cache import transfer
from rayform.cache.transfer import FetchRequest, Transfer
from rayform.errors import IntegrityError
from rayform.store.retry import Retry

CHUNK = 4096


@pytest.mark.parametrize("read_size", [CHUNK, 1000, 3 * CHUNK + 17], ids=["one chunk a read", "short reads",
                                                                          "reads across chunks"])
@pytest.mark.parametrize("bad_chunk", [None, 0, 2, 3])
def test_only_verified_chunks_are_handed_on(tmp_path, monkeypatch, read_size, bad_chunk):
    monkeypatch.setattr(transfer, "STREAM_CHUNK", read_size)
    store = rayform.Client(f"memory://transfer-{uuid.uuid4().hex[:8]}", cache=tmp_path / "cache").store
    good = os.urandom(3 * CHUNK + 1234)  # the last chunk is short
    digest = store.put_blob(good)
    chunks = b"".join(hashlib.sha256(good[i:i + CHUNK]).digest() for i in range(0, len(good), CHUNK))
    stored = bytearray(good)
    if bad_chunk is not None:
        stored[bad_chunk * CHUNK + 7] ^= 0x01
        store.backend.fs.pipe_file(store.backend.blob_path(digest), bytes(stored))
    assert store.cache is not None
    handed: list[bytes] = []
    request = FetchRequest(digest, len(good), "shard 0", chunks, CHUNK, Retry())
    run = Transfer(request, lambda start: store.backend.read_from(digest, start),
                   store.cache.writer(digest, len(good)), store.display)
    if bad_chunk is None:
        assert run.run(deliver=handed.append)
        assert b"".join(handed) == good and store.cache.has(digest)
    else:
        with pytest.raises(IntegrityError, match=f"chunk {bad_chunk} "):
            run.run(deliver=handed.append)
        assert b"".join(handed) == good[: bad_chunk * CHUNK]  # every chunk before the bad one, none from it on
        assert not store.cache.has(digest) and not list((tmp_path / "cache").rglob(".tmp-*"))
