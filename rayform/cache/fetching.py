"""Fetching a blob of a store into the cache: whole (manifests, indexes), or chunk by chunk so
that it is read while it arrives (shards, with the pack's chunk digests: ``FetchRequest``).

One process of the machine fetches a blob (its fetch lock), the others read its copy as it
arrives or wait for it; every byte comes through a ``Transfer`` (verified, resumed where a read
stopped, throttling waited out as ``Retry`` says). The cached view (``store_view``) is the
face; this is what it does behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rayform.cache.arrival import Arrival
from rayform.cache.directory import ShardCache
from rayform.cache.transfer import FetchRequest, Transfer
from rayform.errors import BlobNotFound, StoreError
from rayform.store.objectread import SequentialRead
from rayform.store.retry import Retry
from rayform.store.store import Store

T = TypeVar("T")


class CachedStore(Protocol):
    """What fetching needs of the cached view (``store_view.CachedStore``)."""

    backend: Store
    cache: ShardCache | None
    retry: Retry

    @property
    def display(self) -> str: ...

    def local_copy(self, digest: str) -> Path | None: ...

    def local_blob(self, digest: str, what: str = "", on_bytes: Callable[[int], Any] | None = None) -> Path: ...

    def reach(self, what: str) -> None: ...


def fetch(store: CachedStore, request: FetchRequest, arrival: Arrival | None) -> Path:
    """A verified local copy of ``request``'s blob (see ``CachedStore.fetch``); ``arrival`` is
    ended however this ends."""
    try:
        found = _fetch(store, request, arrival)
    except BaseException as e:
        if arrival is not None:
            arrival.end(e)
        raise
    if arrival is not None:
        arrival.end()
    return found


def _fetch(store: CachedStore, request: FetchRequest, arrival: Arrival | None) -> Path:
    digest, size, what = request.digest, request.size, request.what
    found = store.local_copy(digest)
    if found is not None:
        return found
    cache = store.cache
    if cache is None:
        return store.local_blob(digest, what)  # raises: missing or bad
    store.reach(what)
    if arrival is not None and request.chunks is not None:
        elsewhere = cache.arriving_elsewhere(digest)  # another process of the machine fetches it now
        if elsewhere is not None:
            arrival.begin_elsewhere(elsewhere, size)
    with cache.fetching(digest) as lock:
        found = store.local_copy(digest)
        if found is None:
            if arrival is not None and arrival.elsewhere is not None:  # that fetch failed: said to the reader
                arrival.end(StoreError(
                    f"{what}: the process fetching it into {cache.root} stopped at byte "
                    f"{arrival.reached()} of {size}, before the sample read here. Run again"))
                arrival = None
            # read in this thread (the caller's fetch threads give the concurrency): no hand-over
            Transfer(request, opener(store, digest, request.retry), cache.writer(digest, size), store.display,
                     lock=lock).run(arrival=arrival)
            found = cache.blob_path(digest)
    return found


def fetch_whole(store: CachedStore, digest: str, what: str, on_bytes: Callable[[int], Any] | None) -> Path:
    """A blob fetched whole into the cache, verified against its name, through the same resumed,
    throttling-proof read a shard takes (the caller holds the blob's fetch lock)."""
    cache = store.cache
    assert cache is not None
    try:
        size = retrying(store, lambda: store.backend.blob_size(digest), what)
    except BlobNotFound:
        raise BlobNotFound(f"{what}: not in {store.display}") from None
    if size == 0:
        arriving = cache.writer(digest)
        try:
            return arriving.commit(f"{what} from {store.display}")
        finally:
            arriving.discard()
    transfer = Transfer(FetchRequest(digest, size, what, retry=store.retry), opener(store, digest, store.retry),
                        cache.writer(digest, size), store.display)
    transfer.run(deliver=(lambda data: on_bytes(len(data))) if on_bytes else None)
    return cache.blob_path(digest)


def retrying(store: CachedStore, read: Callable[[], T], what: str) -> T:
    """``read()`` tried again after a transient failure (a dropped connection, 503 Slow Down), as
    the store's ``retry`` says, until its budget is spent: then one StoreError saying how long."""
    attempts = store.retry.attempts()
    while True:
        try:
            return read()
        except StoreError as e:
            cause = e.__cause__ if e.__cause__ is not None else e
            if not isinstance(e.__cause__, BaseException) or not attempts.wait(cause):
                if attempts.failed:
                    raise StoreError(f"{what}: {e} (gave up after {attempts.spent()})") from e
                raise


def opener(store: CachedStore, digest: str, retry: Retry) -> Callable[[int], SequentialRead]:
    """How a transfer opens the blob again from a byte on (one streaming read of the store)."""
    return lambda start: store.backend.read_from(digest, start, retry.timeout_s)
