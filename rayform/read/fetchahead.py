"""Shards fetched into the cache ahead of the reader that needs them, on a few threads.

A reader names the shards it will read, in the order it will read them (``want``), and
waits for each just before it reads it (``ready``), so network, hashing and cache writes
overlap decoding. Each shard arrives through ``CachedStore.fetch``: chunk by chunk against
the pack's chunk digests, whole against its name, retried and resumed at the byte where a
connection dropped, one fetcher per shard on the machine. A fetch that failed raises its
error where the reader waits for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rayform.read.reader import PackReader
from rayform.store.fetch import Retry

THREADS = 4  # shards fetched at once per reader: enough to keep a loopback or LAN link busy


class FetchAhead:
    """Fetches the shards ``(part, shard)`` of ``readers`` that a reader is about to read."""

    def __init__(self, readers: list[PackReader], retry: Retry, threads: int = THREADS):
        self.readers = readers
        self.retry = retry
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="rayform-fetch")
        self._pending: dict[tuple[int, int], Future[Path]] = {}
        for reader in readers:
            _ = reader.store  # opened here, in the reading process, before any thread uses it
            reader.chunk_digests()

    def want(self, shards: Iterable[tuple[int, int]]) -> None:
        """Start fetching these (in this order) unless they are under way or here already."""
        for key in shards:
            if key not in self._pending:
                self._pending[key] = self._pool.submit(self._fetch, *key)

    def ready(self, key: tuple[int, int]) -> None:
        """Wait until shard ``key`` is in the cache (raising what its fetch raised)."""
        future = self._pending.get(key)
        if future is None:
            self.want([key])
            future = self._pending[key]
        future.result()

    def done(self, key: tuple[int, int]) -> None:
        """The reader is through with this shard (a later ``want`` fetches it again if need be)."""
        self._pending.pop(key, None)

    def _fetch(self, part: int, shard: int) -> Path:
        return self.readers[part].fetch(shard, self.retry)

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()

    def __enter__(self) -> FetchAhead:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
