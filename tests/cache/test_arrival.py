"""A shard read while it arrives (rayform.cache.transfer.Arrival): by this process's fetch, or by
another process's (a real forked one), only ever up to the bytes verified so far."""

from __future__ import annotations

import hashlib
import mmap
import multiprocessing
import os
import threading
import uuid

import numpy as np
import pytest

import rayform
from rayform.cache.arrival import Arrival
from rayform.cache.transfer import FetchRequest
from rayform.errors import IntegrityError, StoreError
from rayform.store.retry import Retry

CHUNK = 4096
pytestmark = pytest.mark.timeout(60)


class Gated:
    """A store read that stops at byte ``gate`` until ``go`` is set (then dies there, with ``die``);
    ``began`` is set at its first read (the fetch holds the shard's lock by then)."""

    def __init__(self, data: bytes, start: int, gate: int, go, die: bool = False, began=None):
        self.data, self.pos, self.gate, self.go, self.die, self.began = data, start, gate, go, die, began

    def read(self, n: int = -1) -> bytes:
        if self.began is not None:
            self.began.set()
        if self.pos >= self.gate and (self.die or not self.go.is_set()):
            self.go.wait(30)
            if self.die:
                os._exit(0)  # a killed fetcher: no cleanup, its lock released by the kernel
        end = len(self.data) if n < 0 else min(len(self.data), self.pos + n)
        if self.pos < self.gate <= end and (self.die or not self.go.is_set()):
            end = self.gate
        out, self.pos = self.data[self.pos:end], end
        return out

    def close(self) -> None:
        pass


@pytest.fixture
def shard(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    store = rayform.Client(f"memory://arrival-{uuid.uuid4().hex[:8]}").store
    data = os.urandom(6 * CHUNK + 123)
    digest = store.put_blob(data)
    chunks = b"".join(hashlib.sha256(data[i:i + CHUNK]).digest() for i in range(0, len(data), CHUNK))
    return store, data, digest, chunks


def _gate(monkeypatch, store, data, gate, go, die=False):
    monkeypatch.setattr(type(store.backend), "read_from",
                        lambda self, digest, start, *a: Gated(data, start, gate, go, die))


def _fetch(store, data, digest, chunks, arrival):
    return store.fetch(FetchRequest(digest, len(data), "shard 0", chunks, CHUNK, Retry(budget_s=0)), arrival)


def _bytes(arrival: Arrival, end: int) -> bytes:
    arrival.wait_for(end)
    with mmap.mmap(arrival.fd, arrival.size, prot=mmap.PROT_READ) as m:
        return bytes(m[:end])


def test_a_shard_is_read_up_to_its_verified_bytes_while_it_arrives(shard, monkeypatch):
    store, data, digest, chunks = shard
    go = threading.Event()
    _gate(monkeypatch, store, data, 2 * CHUNK + 10, go)
    arrival = Arrival()
    fetcher = threading.Thread(target=_fetch, args=(store, data, digest, chunks, arrival))
    fetcher.start()
    assert arrival.wait_begun()
    assert _bytes(arrival, 2 * CHUNK) == data[:2 * CHUNK]  # two whole chunks came: readable
    later = threading.Thread(target=arrival.wait_for, args=(2 * CHUNK + 1,))
    later.start()
    later.join(0.3)
    assert later.is_alive() and not store.cache.has(digest)  # the third chunk is not whole: not readable
    go.set()
    later.join(10)
    fetcher.join(10)
    assert _bytes(arrival, len(data)) == data and arrival.whole and store.cache.has(digest)
    arrival.close()


def test_a_chunk_that_does_not_match_stops_the_reader_at_it(shard, monkeypatch):
    store, data, digest, chunks = shard
    bad = bytearray(data)
    bad[3 * CHUNK + 5] ^= 1
    go = threading.Event()
    go.set()
    _gate(monkeypatch, store, bytes(bad), 0, go)
    arrival = Arrival()
    with pytest.raises(IntegrityError, match="chunk 3 "):
        _fetch(store, data, digest, chunks, arrival)
    assert _bytes(arrival, 3 * CHUNK) == data[:3 * CHUNK]
    with pytest.raises(IntegrityError, match="chunk 3 "):
        arrival.wait_for(3 * CHUNK + 1)
    assert not store.cache.has(digest)
    arrival.close()


def _fetch_in_another_process(store, data, digest, chunks, gate, go, die, began):
    Gated_ = Gated  # the child's own copy of the patched read
    type(store.backend).read_from = lambda self, d, start, *a: Gated_(data, start, gate, go, die, began)
    _fetch(store, data, digest, chunks, None)


@pytest.mark.parametrize("dies", [False, True], ids=["finishes", "is killed"])
def test_another_process_s_copy_is_read_as_it_arrives(shard, monkeypatch, dies):
    """The first reader of a shard on the machine fetches it; the others read its copy as it
    arrives instead of waiting for the whole. If that fetch dies, they are told, and fetch it."""
    store, data, digest, chunks = shard
    ctx = multiprocessing.get_context("fork")
    go, began = ctx.Event(), ctx.Event()
    other = ctx.Process(target=_fetch_in_another_process,
                        args=(store, data, digest, chunks, 4 * CHUNK + 7, go, dies, began))
    other.start()
    # its fetch has begun, holding the shard's lock (its lock file appears a moment before it is
    # held: waiting for the file alone let this process take the lock first under load)
    assert began.wait(30)
    _gate(monkeypatch, store, data, len(data), threading.Event())  # ours, if it fetches: no gate
    arrival = Arrival()
    mine = threading.Thread(target=lambda: _fetch(store, data, digest, chunks, arrival))
    mine.start()
    assert arrival.wait_begun() and arrival.elsewhere is not None
    assert _bytes(arrival, 4 * CHUNK) == data[:4 * CHUNK]  # its verified chunks, while it is gated
    assert not store.cache.has(digest)
    if dies:
        go.set()  # it exits at the gate
        with pytest.raises(StoreError, match=r"shard 0: the process fetching it .* stopped at byte 16384 of"):
            arrival.wait_for(len(data))
    else:
        go.set()
        assert _bytes(arrival, len(data)) == data
    mine.join(10)
    other.join(10)
    assert not mine.is_alive() and store.cache.has(digest)  # a dead fetcher's shard: fetched by us
    if not dies:
        assert arrival.whole
    arrival.close()


def test_a_fetch_that_fails_before_its_shard_arrives_is_raised_not_waited_for(tmp_path, monkeypatch):
    """A reader waits for a shard to begin arriving; a fetch job that fails before (here: in
    the reader's fetch itself) must wake it with its error, never leave it waiting."""
    from rayform.converters.demo import DemoConfig, ingest_demo
    from rayform.read.reader import PackReader

    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    client = rayform.Client(f"memory://arrival-{uuid.uuid4().hex[:8]}")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=2.0, image_size=16),
                                         progress=False))
    client.pack(s, 15, workers=1, progress=False)
    ds = rayform.torch.StreamingEpisodeDataset(client.slices.get(s.id), obs=["cam0/rgb"], fps=15, horizon=2)

    def broken(self, shard, fetch=False, arrival=None):
        raise StoreError(f"shard {shard}: the link is down")

    monkeypatch.setattr(PackReader, "fetch", broken)
    with pytest.raises(StoreError, match="the link is down"):
        next(iter(ds))


def test_a_copy_arriving_at_another_size_than_the_pack_says_is_refused(tmp_path, monkeypatch):
    """Another process may be fetching the same shard for another pack that claims another
    size for it: the copy is checked against this pack's size before it is mapped."""
    from rayform.converters.demo import DemoConfig, ingest_demo
    from rayform.read.reader import PackReader

    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    client = rayform.Client(f"memory://arrival-{uuid.uuid4().hex[:8]}")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=2.0, image_size=16),
                                         progress=False))
    pack = client.pack(s, 15, workers=1, progress=False)
    reader = PackReader(client.store, pack, pack.members)
    copy = tmp_path / "short"
    copy.write_bytes(b"0123456789")
    arrival = Arrival()
    with open(copy, "rb") as f:
        arrival.begin(f.fileno(), pack.shards[0].bytes)
    arrival.advance(pack.shards[0].bytes)
    first = int(np.flatnonzero(reader.shard_of(np.arange(pack.samples)) == 0)[0])
    reader.arriving(0, arrival)
    with pytest.raises(IntegrityError, match="its copy arriving in the cache is 10 bytes, the pack says"):
        reader.raw_many([first])
    arrival.close()


def test_a_lock_file_left_by_a_dead_fetcher_names_only_the_new_copy(tmp_path):
    from rayform.cache.directory import FetchLock

    path = tmp_path / "lock"
    path.write_bytes(b"\0" * FetchLock.HEAD + b".tmp-a-much-longer-host-name-4242424-kept1234")
    fd = os.open(path, os.O_RDWR)
    try:
        FetchLock(fd).announce(str(tmp_path / ".tmp-h-1-abcd"))
        FetchLock(fd).progress(4096)
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[FetchLock.HEAD:] == b".tmp-h-1-abcd" and int.from_bytes(data[:FetchLock.HEAD], "little") == 4096
