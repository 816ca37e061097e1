"""A store seen through the shard cache: the one face rayform reads and writes a store through;
nothing above the cache layer touches the store (``backend``) itself.

As fsspec layers ``filecache::`` over a filesystem, :class:`CachedStore` layers a
:class:`ShardCache` over a :class:`Store`. It alone owns:

- **a verified local copy of blob D**: a local store's own file, checked once per process;
  a remote store's copy in the cache, fetched into it (``local_blob``, ``fetch``: one fetcher
  per blob on the machine, the others read its copy as it arrives or wait for it). A bad copy
  is never used;
- **refs for offline use**: a remote store's refs are copied into the cache as they are
  read (only once they parse), and read from there when offline;
- **the offline rule**: with ``RAYFORM_OFFLINE=1`` a non-local store is never reached. What
  the cache holds is read; anything else is one :class:`OfflineError`, said in one way.

Everything above (segments, slices, packs, readers, datasets, ``pull``) takes a
``CachedStore``; ``rayform.Client(store, cache=...)`` builds it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rayform import config
from rayform.cache import copying, fetching
from rayform.cache.arrival import Arrival
from rayform.cache.directory import ShardCache
from rayform.cache.marks import read_known_good, verify_once
from rayform.cache.transfer import FetchRequest
from rayform.errors import BlobNotFound, IntegrityError, InvalidInput, OfflineError, StoreError
from rayform.store.content import canonical_json
from rayform.store.freshness import NewBlob
from rayform.store.listing import StoredBlob
from rayform.store.retry import Retry
from rayform.store.store import Store
from rayform.untrusted import json_document


@dataclass(frozen=True)
class StoreRef:
    """What it takes to open a cached store again in another process: picklable, no open handles."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    cache_dir: str | None = None
    cache_limit: int | None = None
    retry: Retry = Retry()

    def open(self) -> CachedStore:
        return CachedStore(Store(self.url, self.storage_options),
                           ShardCache(self.cache_dir, self.cache_limit) if self.cache_dir else None, self.retry)


class CachedStore:
    """``store`` read through ``cache`` (the default cache where none is given; none at all
    for a local store, which is its own local copy)."""

    def __init__(self, store: Store, cache: ShardCache | None = None, retry: Retry = Retry()):
        self.backend = store
        self.cache = None if store.is_local else (cache or ShardCache())
        self.retry = retry  # how a read that meets a busy or flaky store is tried again

    @classmethod
    def open(cls, store: str | os.PathLike[str] | Store | CachedStore | None = None,
             storage_options: dict[str, Any] | None = None,
             cache: ShardCache | str | os.PathLike[str] | None = None, retry: Retry = Retry()) -> CachedStore:
        """A cached view of ``store`` (a URL, a Store, or a view whose cache is replaced)."""
        if isinstance(store, CachedStore):
            store = store.backend
        backend = store if isinstance(store, Store) else Store(store, storage_options)
        return cls(backend, cache if isinstance(cache, ShardCache) or cache is None else ShardCache(cache), retry)

    def __repr__(self) -> str:
        return f"CachedStore({self.display!r}, cache={str(self.cache.root) if self.cache else None!r})"

    # -- what it is --------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.backend.url

    @property
    def display(self) -> str:
        return self.backend.display

    @property
    def id(self) -> str:
        return self.backend.id

    @property
    def is_local(self) -> bool:
        return self.backend.is_local

    @property
    def root(self) -> str:
        return self.backend.root

    @property
    def ref(self) -> StoreRef:
        cache = self.cache
        return StoreRef(self.backend.url, self.backend.storage_options, str(cache.root) if cache else None,
                        cache.limit if cache else None, self.retry)

    @property
    def cache_root(self) -> str:
        """Where the cache is (``-`` for a local store, which needs none)."""
        return str(self.cache.root) if self.cache is not None else "-"

    @property
    def missing(self) -> bool:
        """True for a local store whose directory does not exist yet (``Store.missing``)."""
        return self.backend.missing

    @property
    def offline(self) -> bool:
        """True when RAYFORM_OFFLINE=1 keeps rayform off this (non-local) store."""
        return self.cache is not None and config.offline()

    def offline_error(self, what: str, missing: str = "") -> OfflineError:
        """The one offline message: ``what`` needs the store; ``missing`` says what the cache
        lacks (how to get it is the caller's to add, who knows which slice it is of)."""
        if missing:
            return OfflineError(f"{what}: {missing}, and RAYFORM_OFFLINE=1 forbids reaching {self.display}")
        return OfflineError(f"{what}: RAYFORM_OFFLINE=1 forbids reaching {self.display}. Unset RAYFORM_OFFLINE to "
                            "write to it, or use a local store (--store DIR)")

    def reach(self, what: str) -> None:
        """Raise the offline error where RAYFORM_OFFLINE=1 forbids reaching this store for ``what``."""
        if self.offline:
            raise self.offline_error(what, f"not in the cache {self.cache_root}")

    def _reach_to_write(self, what: str) -> None:
        if self.offline:
            raise self.offline_error(f"writing {what}")

    # -- writes ------------------------------------------------------------------------
    def put_blob(self, data: bytes | memoryview) -> str:
        self._reach_to_write("a blob")
        return self.backend.put_blob(data)

    def put_blob_file(self, local_path: str | os.PathLike[str], digest: str | None = None, *,
                      move: bool = False) -> str:
        self._reach_to_write("a blob")
        return self.backend.put_blob_file(local_path, digest, move=move)

    def put_json_blob(self, obj: Any) -> str:
        return self.put_blob(canonical_json(obj))

    def put_ref(self, key: str, obj: Any) -> None:
        self._reach_to_write(f"ref {key}")
        self.backend.put_ref(key, obj)

    def delete_ref(self, key: str) -> None:
        self._reach_to_write(f"ref {key}")
        self.backend.delete_ref(key)

    def recording_new_blobs(self) -> contextlib.AbstractContextManager[list[NewBlob]]:
        """While held, the blobs written through this view that were not in the store before
        (``Store.recording_new_blobs``)."""
        return self.backend.recording_new_blobs()

    def take_back(self, blobs: Iterable[NewBlob]) -> int:
        """A failed writer's new blobs deleted, but those another writer freshened since
        (``Store.take_back``)."""
        self._reach_to_write("taking back blobs")
        return self.backend.take_back(blobs)

    def collect_blob(self, digest: str, cutoff: float) -> bool:
        """``rayform gc``: an unreachable blob deleted unless written or freshened after ``cutoff``."""
        self._reach_to_write(f"blob {digest[:16]}")
        return self.backend.collect_blob(digest, cutoff)

    def delete_blob(self, digest: str) -> None:
        """Remove a blob nothing else can name (a pack's scratch run: ``Store.delete_blob``)."""
        self._reach_to_write(f"blob {digest[:16]}")
        self.backend.delete_blob(digest)

    def remove_empty_folders(self) -> None:
        self.backend.remove_empty_folders()

    # -- blobs -------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        if self.offline:
            assert self.cache is not None
            return self.cache.has(digest)
        return self.backend.has_blob(digest)

    def confirm_blob(self, digest: str) -> bool:
        return self.backend.confirm_blob(digest)

    def confirm_committed(self, blobs: Mapping[str, bytes | None], what: str) -> None:
        """Around the commit of a ref naming ``blobs`` (digest -> its bytes): each freshened, so
        a gc deciding from now on keeps it; one a gc with a grace shorter than the write
        (``gc --force``) deleted meanwhile is written again from its bytes, or, where they are
        not at hand (None: a shard moved into the store), a StoreError naming the fix."""
        for digest, data in blobs.items():
            if self.confirm_blob(digest):
                continue
            if data is None:
                raise StoreError(f"{what}: blob {digest[:16]} was deleted before its commit (a gc with a grace "
                                 f"shorter than the write, in {self.display}?); nothing was recorded: write it "
                                 "again, and run gc with a longer --grace")
            self.put_blob(data)

    def get_blob(self, digest: str, what: str = "") -> bytes:
        """The blob's bytes, verified (for a remote store: through its cached copy)."""
        if self.cache is None:
            if self.backend.is_local:
                known = read_known_good(Path(self.backend.blob_path(digest)), digest)
                if known is not None:
                    return known
            return self.backend.get_blob(digest)
        return self.local_blob(digest, what).read_bytes()

    def get_json_blob(self, digest: str, what: str = "manifest") -> dict[str, Any]:
        return json_document(self.get_blob(digest, f"{what} {digest[:16]}"), f"{what} {digest[:16]} in {self.display}")

    def open_blob(self, digest: str) -> IO[bytes]:
        """A raw stream of the blob in the store, NOT verified: the caller hashes what it reads."""
        self.reach(f"blob {digest[:16]}")
        return self.backend.open_blob(digest)

    def local_copy(self, digest: str) -> Path | None:
        """A verified local file of the blob if there is one now (nothing is fetched)."""
        if self.cache is not None:
            return self.cache.copy(digest)
        path = Path(self.backend.blob_path(digest))
        return path if path.is_file() and verify_once(path, digest) else None

    def local_blob(self, digest: str, what: str = "", on_bytes: Callable[[int], Any] | None = None) -> Path:
        """A verified local file of the blob: fetched into the cache first where it is not
        there (``on_bytes`` counts what arrives). A bad blob in a local store is an error."""
        what = what or f"blob {digest[:16]}"
        found = self.local_copy(digest)
        if found is not None:
            return found
        if self.cache is None:
            path = Path(self.backend.blob_path(digest))
            if not path.is_file():
                raise BlobNotFound(f"{what}: not in {self.display}")
            raise IntegrityError(f"{what} in {self.display}: its bytes do not match its name "
                                 f"({digest[:16]}). The stored copy is corrupt; re-create it from its source")
        self.reach(what)
        with self.cache.fetching(digest):
            found = self.local_copy(digest)  # fetched by another process while we waited
            return found if found is not None else fetching.fetch_whole(self, digest, what, on_bytes)

    def fetch(self, request: FetchRequest, arrival: Arrival | None = None) -> Path:
        """A verified local copy of ``request``'s blob, fetched chunk by chunk where there is none
        (``fetching``: one fetcher per blob on this machine, the others read its copy as it
        arrives or wait for it). Under a cache limit another process may evict it as soon as it
        is in place: pin it (``ShardCache.pin``) to read it, and fetch again if that finds it
        gone. ``arrival`` (ended however this ends) lets another thread read the copy while it
        arrives, where chunks are verified."""
        return fetching.fetch(self, request, arrival)

    # -- what the store-wide commands need ---------------------------------------------
    def list_blobs(self) -> Iterator[StoredBlob]:
        """Every blob the store holds, with its size and age (``rayform gc``)."""
        self.reach("listing the blobs")
        return self.backend.list_blobs()

    def blob_file(self, digest: str) -> Path:
        """The file of a blob in a local store (not verified: see ``local_copy``)."""
        if not self.is_local:
            raise InvalidInput(f"{self.display}: not a local store; its blobs have no local file but their copies")
        return Path(self.backend.blob_path(digest))

    def blob_url(self, digest: str) -> str:
        """Where a blob lies in the store: its URL (``s3://bucket/prefix/blobs/aa/<sha256>``) or path."""
        return f"{self.url}/{Store.blob_key(digest)}"

    def read_range(self, digest: str, start: int, size: int) -> bytes:
        """``size`` bytes of a blob from ``start``, straight from the store and NOT verified: the
        caller checks them (a pack's scratch sections carry their own hashes)."""
        self.reach(f"blob {digest[:16]}")
        return self.backend.read_range(digest, start, size)

    def presign(self, digests: Iterable[str]) -> None:
        """Sign read URLs for these blobs now, where the store signs them: a DataLoader worker
        forked later finds them signed and makes its first request at once."""
        if not self.is_local and not self.offline:
            self.backend.presign(digests)

    def copy_to(self, dest: CachedStore, digest: str) -> int | None:
        """Copy one blob to ``dest``, verified before a byte of it is written there (``copying``):
        its size, or None where ``dest`` has it already."""
        return copying.copy_blob(self, dest, digest)

    # -- refs --------------------------------------------------------------------------
    def get_ref(self, key: str, parse: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        """A small JSON document at ``key``, or what ``parse`` makes of it (see ``Store.get_ref``).
        A remote store's ref is copied into the cache once it parses; offline it is read from there."""
        if self.cache is None:
            return self.backend.get_ref(key, parse)
        name = key.rsplit("/", 1)[-1].removesuffix(".json")
        if self.offline:
            cached = self.cache.get_ref(self.id, key)
            if cached is None:
                raise self.offline_error(name, f"not in the cache {self.cache_root}")
            return parse(cached) if parse is not None else cached
        data = fetching.retrying(self, lambda: self.backend.get_ref_bytes(key), f"ref {key}")
        parsed = self.backend.parse_ref(key, data, parse)  # a ref that does not parse never reaches the cache
        if self.cache.get_ref(self.id, "store.json") is None:  # lets `rayform cache` name the store
            self.cache.put_ref(self.id, "store.json", canonical_json({"url": self.display}))
        self.cache.put_ref(self.id, key, data)
        return parsed

    def has_ref(self, key: str) -> bool:
        if self.offline:
            assert self.cache is not None
            return self.cache.get_ref(self.id, key) is not None
        return self.backend.has_ref(key)

    def list_refs(self, prefix: str) -> Iterator[str]:
        """Keys of the refs below ``prefix``, sorted. Offline, the refs this cache holds of the
        store; a cache that never saw the store is an OfflineError."""
        if self.offline:
            assert self.cache is not None
            if not self.cache.has_store(self.id):
                raise self.offline_error(f"listing {prefix}", f"nothing of this store is in the cache {self.cache.root}")
            return self.cache.list_refs(self.id, prefix)
        return self.backend.list_refs(prefix)

    def sweep_temporaries(self) -> int:
        """Delete what killed writers left in a local store (ours only, stale only)."""
        return self.backend.sweep_temporaries()
