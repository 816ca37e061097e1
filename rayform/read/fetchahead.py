"""Shards fetched into the cache ahead of the reader that needs them, on a few threads.

A reader names the shards it will read, in the order it will read them (``want``), and
waits for each just before it reads it (``ready``), so network, hashing and cache writes
overlap decoding; at most ``AHEAD`` shards are fetched beyond those it is reading
(``AHEAD_LIMITED`` under a cache limit). Each
shard arrives through ``CachedStore.fetch``: chunk by chunk against the pack's chunk
digests, whole against its name, retried and resumed at the byte where a connection
dropped, one fetcher per shard on the machine. A fetch that failed raises its error where
the reader waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from rayform.cache.arrival import Arrival
from rayform.cache.directory import ShardCache
from rayform.cache.eviction import Pin
from rayform.read.reader import PackReader

THREADS = 4  # shards fetched at once per reader: enough to keep a loopback or LAN link busy
AHEAD = 4  # shards fetched (and pinned) before the reader gets to them, at most
AHEAD_LIMITED = 1  # the same under a cache limit: what is pinned ahead is over the limit


class FetchAhead:
    """Fetches the shards ``(part, shard)`` of ``readers`` that a reader is about to read,
    at most ``ahead`` beyond those it is reading; each is pinned in the cache from its
    arrival until the reader is done with it (``done``), so a limited cache never evicts a
    shard between its fetch and its read."""

    def __init__(self, readers: list[PackReader], threads: int = THREADS, ahead: int | None = None):
        self.readers = readers
        limited = any(r.store.cache is not None and r.store.cache.limit is not None for r in readers)
        self.ahead = max(1, ahead if ahead is not None else AHEAD_LIMITED if limited else AHEAD)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="rayform-fetch")
        self._pending: dict[tuple[int, int], Future[Pin | None]] = {}
        self._queued: dict[tuple[int, int], None] = {}  # wanted, not yet started: insertion order
        self._reading: set[tuple[int, int]] = set()
        self._arrivals: dict[tuple[int, int], Arrival] = {}  # each fetch's, readable while it arrives
        self._started = False  # the reader has read its first step
        for reader in readers:
            _ = reader.store  # opened here, in the reading process, before any thread uses it
            reader.chunk_digests()

    def want(self, shards: Iterable[tuple[int, int]]) -> None:
        """Fetch these (in this order) unless they are under way or queued already."""
        for key in shards:
            if key not in self._pending:
                self._queued.setdefault(key)
        self._start()

    def _start(self) -> None:
        # Until the reader has read its first step (``warmed``), only the shards it waits for
        # are fetched: beside the ones after them they would share the link and the cores,
        # and the first batch would wait for several shards' first bytes instead of one's.
        if not self._started:
            return
        while self._queued and len(self._pending) - len(self._reading) < self.ahead:
            key = next(iter(self._queued))
            del self._queued[key]
            self._submit(key)

    def _submit(self, key: tuple[int, int]) -> None:
        arrival = self._arrivals[key] = Arrival()
        future = self._pending[key] = self._pool.submit(self._fetch, *key, arrival)
        # however the job ends (failed before its fetch began, cancelled), a reader waiting on
        # its arrival is woken: it then takes the job's outcome
        future.add_done_callback(lambda f: arrival.end(None if f.cancelled() else f.exception()))

    def ready(self, key: tuple[int, int]) -> None:
        """Wait until shard ``key`` can be read: in the cache, or arriving with its chunks
        verified as they come (the reader then waits for each sample's bytes); raises what
        its fetch raised."""
        if key not in self._pending:
            self._queued.pop(key, None)
            self._submit(key)
        self._reading.add(key)
        arrival = self._arrivals[key]
        if arrival.wait_begun():
            self.readers[key[0]].arriving(key[1], arrival)
        else:
            self._pending[key].result()

    def warmed(self) -> None:
        """The reader has read its first step: fetch ahead from now on."""
        if not self._started:
            self._started = True
            self._start()

    def done(self, key: tuple[int, int]) -> None:
        """The reader is through with this shard: unpin it, fetch the next ones."""
        future = self._pending.pop(key, None)
        self._reading.discard(key)
        arrival = self._arrivals.pop(key, None)
        if arrival is not None:
            arrival.close()
        if future is not None and future.done() and future.exception() is None:
            pin = future.result()
            if pin is not None:
                pin.release()
                self._limited_cache(key[0]).make_room()  # under a limit, what it let go may go now
        self._start()

    def _limited_cache(self, part: int) -> ShardCache:
        cache = self.readers[part].store.cache
        assert cache is not None  # a pin is only ever taken in a cache
        return cache

    def _fetch(self, part: int, shard: int, arrival: Arrival) -> Pin | None:
        return self.readers[part].pinned(shard, fetch=True, arrival=arrival)[1]

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for future in self._pending.values():
            if future.done() and not future.cancelled() and future.exception() is None:
                pin = future.result()
                if pin is not None:
                    pin.release()
        self._pending.clear()
        self._queued.clear()
        for arrival in self._arrivals.values():
            arrival.close()
        self._arrivals.clear()

    def __enter__(self) -> FetchAhead:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
