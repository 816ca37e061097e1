"""The shard cache: local, content-addressed copies of a remote store's blobs and refs.

Layout under ``~/.cache/rayform`` (or ``RAYFORM_CACHE_DIR``)::

    blobs/<aa>/<sha256>                 a verified copy of a blob (shards, indexes, manifests)
    refs/<store id>/refs/...            the last refs read from each store (for offline use)

A blob is named by its hash, so a cached copy can never go stale. Every file arrives by a
unique temporary name beside its target and an atomic rename, so any number of processes
on any number of machines can share one cache over NFS or Lustre: a reader sees a whole
file or none. Two processes fetching one blob at once both write a whole copy; the second
rename wins and both copies are valid.

Every copy is verified once per process before it is used (and on arrival): a copy whose
bytes do not hash to its name is deleted and fetched again.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rayform import config
from rayform.errors import IntegrityError

if TYPE_CHECKING:
    from rayform.store import Store

CHUNK = 4 << 20
STALE_TEMP_SECONDS = 3600

# (path) -> (inode, size, mtime_ns) of copies this process has hashed and found good.
_VERIFIED: dict[str, tuple[int, int, int]] = {}


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def hash_file(path: Path) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return hashlib.sha256(b"").hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return hashlib.sha256(m).hexdigest()


def verify_once(path: Path, digest: str) -> bool:
    """True if ``path`` hashes to ``digest`` (hashed once per process per file version)."""
    key = str(path)
    try:
        stamp = _stamp(path)
    except FileNotFoundError:
        return False
    if _VERIFIED.get(key) == stamp:
        return True
    if hash_file(path) != digest:
        return False
    _VERIFIED[key] = stamp
    return True


class ShardCache:
    """Verified local copies of remote blobs. Cheap to create; holds no open files."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else config.cache_dir()

    def __repr__(self) -> str:
        return f"ShardCache({str(self.root)!r})"

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def ensure(self, store: Store, digest: str, on_bytes: Callable[[int], Any] | None = None) -> Path:
        """A verified local copy of ``digest``, fetched from ``store`` if absent or bad."""
        path = self.blob_path(digest)
        if path.is_file():
            if verify_once(path, digest):
                return path
            unlink_if_present(path)  # a bad copy is never used: drop it and fetch again
        self.fetch(store, digest, on_bytes)
        return path

    def fetch(self, store: Store, digest: str, on_bytes: Callable[[int], Any] | None = None) -> Path:
        """Stream a blob from the store into the cache, hashing as it arrives."""
        arriving = CacheWriter(self.blob_path(digest), digest)
        try:
            with store.open_blob(digest) as src:
                while chunk := src.read(CHUNK):
                    arriving.write(chunk)
                    if on_bytes:
                        on_bytes(len(chunk))
            return arriving.commit(f"blob {digest[:16]} from {store.display}")
        finally:
            arriving.discard()

    # -- refs --------------------------------------------------------------------------
    def ref_path(self, store_id: str, key: str) -> Path:
        return self.root / "refs" / store_id / key

    def put_ref(self, store_id: str, key: str, data: bytes) -> None:
        path = self.ref_path(store_id, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            unlink_if_present(tmp)
            raise

    def get_ref(self, store_id: str, key: str) -> Any | None:
        try:
            return json.loads(self.ref_path(store_id, key).read_bytes())
        except FileNotFoundError:
            return None

    def list_refs(self, store_id: str, prefix: str) -> Iterator[str]:
        base = self.root / "refs" / store_id
        top = base / prefix
        if not top.is_dir():
            return iter(())
        return iter(sorted(
            str(p.relative_to(base)) for p in top.rglob("*.json") if not p.name.startswith(".tmp-")
        ))

    def store_ids(self) -> list[str]:
        base = self.root / "refs"
        return sorted(p.name for p in base.iterdir()) if base.is_dir() else []

    # -- housekeeping ------------------------------------------------------------------
    def size(self) -> tuple[int, int]:
        """(bytes, files) of cached blobs."""
        total = files = 0
        for p in (self.root / "blobs").rglob("*"):
            if p.is_file() and not p.name.startswith(".tmp-"):
                total += p.stat().st_size
                files += 1
        return total, files

    def remove_stale_temporaries(self, older_than: float = STALE_TEMP_SECONDS) -> int:
        """Delete temporary files left by killed processes; returns how many."""
        now, n = time.time(), 0
        for p in self.root.rglob(".tmp-*"):
            try:
                if now - p.stat().st_mtime > older_than:
                    p.unlink()
                    n += 1
            except FileNotFoundError:
                pass
        return n


class CacheWriter:
    """A blob arriving in the cache: written under a unique temporary name beside its place,
    hashed on the way, and renamed into place only if its bytes hash to its name."""

    def __init__(self, path: Path, digest: str):
        self.path, self.digest, self.bytes = path, digest, 0
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(dir=path.parent, prefix=f".tmp-{digest[:8]}-")
        self._out = os.fdopen(fd, "wb")
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self._out.write(data)
        self.bytes += len(data)

    def commit(self, what: str) -> Path:
        """Put the copy in place (and count it verified), or raise naming ``what`` and keep nothing."""
        self._out.close()
        actual = self._hash.hexdigest()
        if actual != self.digest:
            self.discard()
            raise IntegrityError(
                f"{what}: its {self.bytes} bytes hash to {actual[:16]}. The store's copy is corrupt; it was not cached"
            )
        os.chmod(self._tmp, 0o644)
        os.replace(self._tmp, self.path)
        self._tmp = None
        _VERIFIED[str(self.path)] = _stamp(self.path)
        return self.path

    def discard(self) -> None:
        """Drop the partial copy (a no-op once committed)."""
        self._out.close()
        if self._tmp is not None:
            unlink_if_present(self._tmp)
            self._tmp = None


def unlink_if_present(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
