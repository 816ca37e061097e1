"""A blob copied from one store to another, verified before a byte of it is written there
(``rayform push``): from its verified local copy where there is one, else straight from the
source store, not through the cache (a push of a slice would fill it)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

from rayform.errors import IntegrityError
from rayform.store.content import CHUNK
from rayform.store.store import Store


class CachedStore(Protocol):
    """What copying needs of the cached view (``store_view.CachedStore``), on either side."""

    backend: Store

    def has_blob(self, digest: str) -> bool: ...

    def local_copy(self, digest: str) -> Path | None: ...

    def put_blob(self, data: bytes | memoryview) -> str: ...

    def put_blob_file(self, local_path: str | os.PathLike[str], digest: str | None = None, *,
                      move: bool = False) -> str: ...

    def reach(self, what: str) -> None: ...

IN_MEMORY_BYTES = 64 << 20  # a larger blob is spooled through a temporary file


def copy_blob(source: CachedStore, dest: CachedStore, digest: str) -> int | None:
    """Copy one blob, verified; its size, or None where ``dest`` had it. A blob the source lacks
    is a BlobNotFound, one whose bytes do not match its name an IntegrityError: nothing of it
    is written."""
    if dest.has_blob(digest):
        return None
    local = source.local_copy(digest)  # verified: a local store, or a cached copy
    if local is not None:
        dest.put_blob_file(local, digest)
        return local.stat().st_size
    source.reach(f"blob {digest[:16]}")
    backend = source.backend
    size = backend.blob_size(digest)
    if size <= IN_MEMORY_BYTES:
        data = backend.get_blob(digest)
        dest.put_blob(data)
        return len(data)
    return _spooled(backend, dest, digest)


def _spooled(source: Store, dest: CachedStore, digest: str) -> int:
    """A large blob through a temporary file, hashed as it arrives, put once it matches."""
    fd, tmp = tempfile.mkstemp(prefix="rayform-push-")
    try:
        h, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, source.open_blob(digest) as src:
            while chunk := src.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
                size += len(chunk)
        if h.hexdigest() != digest:
            raise IntegrityError(f"blob {digest[:16]} in {source.display}: its bytes hash to {h.hexdigest()[:16]}")
        dest.put_blob_file(tmp, digest)
        return size
    finally:
        os.unlink(tmp)
