"""The shard cache: local, content-addressed copies of a remote store's blobs and refs.

Layout under ``~/.cache/rayform`` (or ``RAYFORM_CACHE_DIR``)::

    blobs/<aa>/<sha256>                 a verified copy of a blob (shards, indexes, manifests)
    refs/<store id>/refs/...            the last refs read from each store (for offline use)
    locks/<sha256>                      held while one process fetches that blob; it names
                                        the copy and how far it is verified (``FetchLock``)

With a ``limit`` (``RAYFORM_CACHE_LIMIT``), room is made before each fetch by evicting the
least recently used blobs that no process is reading (``rayform.cache.eviction``).

A blob is named by its hash, so a cached copy can never go stale. Every file arrives by a
unique temporary name beside its target and an atomic rename, so any number of processes
on any number of machines can share one cache over NFS or Lustre: a blob's place holds a
whole file or none. A process about to fetch a blob takes its fetch lock, so the others on
the machine read that copy as it arrives (its verified bytes only), or wait for it,
instead of fetching their own (where locks do not reach, both write a whole copy; the
second rename wins and both copies are valid).

Every copy is verified once per process before it is used (and on arrival): a copy whose
bytes do not hash to its name is deleted and fetched again. The cache knows nothing of
stores: what to fetch, and when, is the cached view's (``rayform.cache.store_view``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from rayform import config, names
from rayform.cache import eviction
from rayform.cache.marks import VERIFIED_DIR, mark_verified, verify_once
from rayform.errors import IntegrityError, InvalidInput, StoreError
from rayform.sizes import parse_size
from rayform.store.atomic import (
    STALE_TEMP_SECONDS,
    is_temporary,
    open_temporary,
    publish,
    sweep_temporaries,
    unlink_if_present,
    write_atomic,
)
from rayform.untrusted import json_document

T = TypeVar("T")


def _usable(root: Path, make: Callable[[], T]) -> T:
    """Run a filesystem call on the cache, turning "the cache dir is unusable" into one error."""
    try:
        return make()
    except (NotADirectoryError, FileExistsError, PermissionError, IsADirectoryError) as e:
        raise StoreError(
            f"cache {root}: unusable ({e.strerror or e}). Point RAYFORM_CACHE_DIR at a writable directory"
        ) from None


class ShardCache:
    """Verified local copies of remote blobs. Cheap to create; holds no open files.

    ``limit``: bytes (or ``"200GB"``) the cache makes room within before each fetch; None:
    ``RAYFORM_CACHE_LIMIT``, else no limit."""

    def __init__(self, root: str | os.PathLike[str] | None = None, limit: int | str | None = None):
        self.root = Path(root) if root is not None else config.cache_dir()
        from_env = config.cache_limit() if limit is None else None
        self.limit = parse_size(limit, "cache limit") if limit is not None else \
            parse_size(from_env, "RAYFORM_CACHE_LIMIT") if from_env is not None else None
        if self.limit is not None and self.limit < 1:
            raise InvalidInput(f"cache limit {limit!r}: give a size such as 200GB")

    def __repr__(self) -> str:
        return f"ShardCache({str(self.root)!r})"

    def blob_path(self, digest: str) -> Path:
        """Where the copy of ``digest`` lives; the name is checked first (it may come from a store)."""
        names.digest(digest)
        return self.root / "blobs" / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def copy(self, digest: str) -> Path | None:
        """The verified copy of ``digest``, or None; a copy whose bytes do not match its name
        is deleted (it is never used, and can be fetched again)."""
        path = self.blob_path(digest)
        if not path.is_file() or path.is_symlink():
            return None
        if verify_once(path, digest, ctime=False):
            return path
        unlink_if_present(path)
        return None

    def writer(self, digest: str, size: int = 0) -> CacheWriter:
        """Where a copy of ``digest`` (``size`` bytes) arrives: see :class:`CacheWriter`.
        Under a limit, room for it is made first."""
        if self.limit is not None:
            eviction.shrink(self.root, self.limit, size)
        return CacheWriter(self, digest)

    def make_room(self) -> None:
        """Under a limit, evict what no process reads until the cache is within it (a reader
        that lets a shard go calls this, so a finished epoch leaves the cache within its limit)."""
        if self.limit is not None:
            eviction.shrink(self.root, self.limit)

    def pin(self, digest: str) -> eviction.Pin | None:
        """Hold the copy of ``digest`` against eviction while it is read (None: not cached)."""
        try:
            return eviction.Pin(self.blob_path(digest))
        except (FileNotFoundError, NotADirectoryError):
            return None

    @contextlib.contextmanager
    def fetching(self, digest: str) -> Iterator[FetchLock]:
        """Held while this process fetches ``digest``: the others wait for its copy (and may
        read it as it arrives: :meth:`arriving_elsewhere`)."""
        path = self.root / "locks" / names.digest(digest)
        _usable(self.root, lambda: path.parent.mkdir(parents=True, exist_ok=True))
        fd = _usable(self.root, lambda: os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield FetchLock(fd)
        finally:
            unlink_if_present(path)  # a later fetcher makes a new one; at worst two fetch at once
            os.close(fd)

    def arriving_elsewhere(self, digest: str, wait_s: float = 0.05) -> ArrivingCopy | None:
        """The copy of ``digest`` that another process of this machine is fetching now, to read
        as it arrives (its verified bytes), or None if none is (or it has not said where yet,
        within ``wait_s``)."""
        path = self.root / "locks" / names.digest(digest)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    return None  # no one holds it: no one is fetching (the lock goes with the fd)
                except BlockingIOError:
                    pass
                head = os.pread(fd, FetchLock.HEAD + FetchLock.NAME, 0)
                name = head[FetchLock.HEAD:].decode("ascii", "replace")
                if is_temporary(name):  # ours by its name: never a path a lock file could smuggle in
                    copy = os.open(self.blob_path(digest).parent / name, os.O_RDONLY)
                    found = ArrivingCopy(copy, fd, name)
                    fd = -1
                    return found
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.002)
        except OSError:
            return None
        finally:
            if fd >= 0:
                os.close(fd)

    # -- refs --------------------------------------------------------------------------
    def ref_path(self, store_id: str, key: str) -> Path:
        return self.root / "refs" / names.store_id(store_id) / names.key(key)

    def put_ref(self, store_id: str, key: str, data: bytes) -> None:
        path = self.ref_path(store_id, key)
        _usable(self.root, lambda: write_atomic(path, data))

    def get_ref(self, store_id: str, key: str) -> Any | None:
        """The cached ref (parsed), or None if this cache has none."""
        path = self.ref_path(store_id, key)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return json_document(data, f"cached ref {key} ({path})")

    def has_store(self, store_id: str) -> bool:
        """True once anything of this store has been cached (a listing offline needs it)."""
        return (self.root / "refs" / names.store_id(store_id)).is_dir()

    def list_refs(self, store_id: str, prefix: str) -> Iterator[str]:
        base = self.root / "refs" / names.store_id(store_id)
        top = base / names.key(prefix)
        if not top.is_dir():
            return iter(())
        found = []
        for directory, _, files in os.walk(top, followlinks=False):
            for name in files:
                key = str((Path(directory) / name).relative_to(base))
                if name.endswith(".json") and names.is_key(key):
                    found.append(key)
        return iter(sorted(found))

    def store_ids(self) -> list[str]:
        base = self.root / "refs"
        return sorted(p.name for p in base.iterdir() if names.STORE_ID.fullmatch(p.name)) if base.is_dir() else []

    # -- housekeeping ------------------------------------------------------------------
    def size(self) -> tuple[int, int]:
        """(bytes, files) of cached blobs."""
        found = eviction.blobs(self.root)
        return sum(st.st_size for _, st in found), len(found)

    def prune(self, to: int | str) -> eviction.Evicted:
        """Evict least-recently-used blobs no process is reading until the cache fits in ``to``."""
        return eviction.shrink(self.root, parse_size(to, "prune size"))

    def clean(self, digests: Iterable[str] | None = None) -> eviction.Evicted:
        """Evict the given blobs, or every blob (and the refs kept for offline use) when None;
        blobs a process is reading are left."""
        paths = [p for p, _ in eviction.blobs(self.root)] if digests is None else [self.blob_path(d) for d in digests]
        found = eviction.remove(paths)
        if digests is None:
            shutil.rmtree(self.root / VERIFIED_DIR, ignore_errors=True)
        if digests is None and (self.root / "refs").is_dir():
            for directory, _, files in os.walk(self.root / "refs", topdown=False, followlinks=False):
                for name in files:
                    unlink_if_present(os.path.join(directory, name))
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
        return found

    def remove_stale_temporaries(self, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Delete temporaries left by killed processes (ours only; see ``files.is_stale``)."""
        return sweep_temporaries(self.root, older_than) if self.root.is_dir() else 0


class FetchLock:
    """The lock of a blob being fetched, and what it tells the machine's other processes:
    how many bytes of the copy are verified (``HEAD`` bytes) and the copy's file name."""

    HEAD = 8
    NAME = 256  # a temporary's name is at most ~70 characters (``files.temp_prefix``)

    def __init__(self, fd: int):
        self.fd = fd

    def announce(self, copy: str) -> None:
        os.ftruncate(self.fd, 0)  # a lock file left by a dead fetcher may hold a longer name
        os.pwrite(self.fd, struct.pack("<Q", 0) + os.path.basename(copy).encode("ascii")[:self.NAME], 0)

    def progress(self, verified: int) -> None:
        """Bytes ``[0, verified)`` of the copy are written and verified (say so after writing them)."""
        os.pwrite(self.fd, struct.pack("<Q", verified), 0)


class ArrivingCopy:
    """Another process's copy of a blob as it arrives: the copy (``fd``, named ``name``) and
    its lock, which says how far it is verified (``verified``, read from the lock each time
    while the lock still names this copy: a fetcher that died leaves its lock file to the
    next, whose progress is not this copy's)."""

    def __init__(self, fd: int, lock_fd: int, name: str):
        self.fd, self._lock_fd, self.name = fd, lock_fd, name
        self._seen = 0

    def verified(self, at_least: int | None = None) -> int:
        """Bytes of the copy verified: read from the lock, or with ``at_least``, only if fewer
        than that are known yet."""
        if self._lock_fd >= 0 and (at_least is None or self._seen < at_least):
            head = os.pread(self._lock_fd, FetchLock.HEAD + FetchLock.NAME, 0)
            if head[FetchLock.HEAD:].decode("ascii", "replace") == self.name:
                self._seen = max(self._seen, struct.unpack("<Q", head[:FetchLock.HEAD])[0])
        return self._seen

    def freeze(self) -> None:
        """Its fetch has ended: what it verified is all this copy will hold."""
        self.verified()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def close(self) -> None:
        fds, self.fd, self._lock_fd = (self.fd, self._lock_fd), -1, -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


class CacheWriter:
    """A blob arriving in the cache: written under a unique temporary name beside its place,
    hashed on the way, and renamed into place only if its bytes hash to its name. It is
    pinned (a shared lock, which the rename keeps) until the copy is counted verified, so
    eviction cannot take it in between. Writes are unbuffered: what ``write`` returned from is
    in the file, where a reader of a shard still arriving (``arrival.Arrival``) reads it."""

    def __init__(self, cache: ShardCache, digest: str):
        self.path, self.digest, self.bytes = cache.blob_path(digest), digest, 0
        fd, tmp = _usable(cache.root, lambda: open_temporary(self.path.parent))
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._tmp: str | None = tmp
        self._fd: int | None = fd
        self._hash = hashlib.sha256()

    def fileno(self) -> int:
        assert self._fd is not None, "closed"
        return self._fd

    @property
    def temporary(self) -> str:
        """The copy's path while it arrives."""
        assert self._tmp is not None, "committed"
        return self._tmp

    def reserve(self, size: int) -> None:
        """Make the file ``size`` bytes long before it is written (a reader maps it whole)."""
        os.ftruncate(self.fileno(), size)

    def write(self, data: bytes | memoryview) -> None:
        self._hash.update(data)
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(self.fileno(), view):]
        self.bytes += len(data)

    def commit(self, what: str) -> Path:
        """Put the copy in place (and count it verified), or raise naming ``what`` and keep nothing."""
        actual = self._hash.hexdigest()
        if actual != self.digest:
            self.discard()
            raise IntegrityError(
                f"{what}: its {self.bytes} bytes hash to {actual[:16]}. The store's copy is corrupt; it was not cached"
            )
        assert self._tmp is not None, "committed twice"
        publish(self._tmp, self.path)
        self._tmp = None
        mark_verified(self.path, self.digest)
        self._close()  # drops the pin: from here the copy is evictable like any other
        return self.path

    def discard(self) -> None:
        """Drop the partial copy (a no-op once committed)."""
        self._close()
        if self._tmp is not None:
            unlink_if_present(self._tmp)
            self._tmp = None

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
