"""A shard as a stream: read from the cache if it is there, else from the store while
writing it into the cache, hashed on the way and verified at the end.

A dropped connection or a server error mid-shard is retried with exponential backoff and
the read resumes at the byte where it stopped; when the retries run out it is one error
naming the shard and the store. Bytes are yielded to the reader as they arrive, so the
first samples of a shard are used before the shard has finished arriving; a shard whose
bytes do not match its name raises at its end and is not kept.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rayform.cache import unlink_if_present, verify_once
from rayform.errors import IntegrityError, NotFound, OfflineError, RayformError, StoreError
from rayform.store import Store

STREAM_BLOCK = 8 << 20  # ranged reads of 8 MiB: few requests a shard, and the first samples come early


@dataclass(frozen=True)
class Retry:
    """How a read that failed mid-shard is tried again."""

    attempts: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * (2**attempt))


def local_copy(store: Store, digest: str) -> Path | None:
    """A verified local file of the blob (a local store's own, or the cache's), else None."""
    path = store.cache.blob_path(digest) if store.cache is not None else Path(store.blob_path(digest))
    if path.is_file() and verify_once(path, digest):
        return path
    return None


class ShardStream:
    """A read-only file object over one shard (what webdataset's tar iterator reads)."""

    def __init__(self, store: Store, digest: str, size: int, what: str, retry: Retry = Retry()):
        self.store, self.digest, self.size, self.what, self.retry = store, digest, size, what, retry
        self.pos = 0
        self.failures = 0  # reads that failed and were resumed
        self._src: IO[bytes] | None = None
        self._hash: hashlib._Hash | None = None
        self._tmp: str | None = None
        self._out: IO[bytes] | None = None
        self.from_cache = False
        cache = store.cache
        local = local_copy(store, digest)
        if local is not None:
            self._src = open(local, "rb")
            self.from_cache = True
        elif cache is None:
            raise IntegrityError(f"{what} ({digest[:16]}) in {store.display}: its bytes do not match its name")
        else:
            local = cache.blob_path(digest)
            if store.offline:
                raise OfflineError(f"{what} ({digest[:16]}): not in the cache {cache.root}")
            self._hash = hashlib.sha256()
            local.parent.mkdir(parents=True, exist_ok=True)
            fd, self._tmp = tempfile.mkstemp(dir=local.parent, prefix=f".tmp-{digest[:8]}-")
            self._out = os.fdopen(fd, "wb")
            self._local = local
            self._src = self._open_remote()

    def _open_remote(self) -> IO[bytes]:
        f = self.store.fs.open(self.store.blob_path(self.digest), "rb", block_size=STREAM_BLOCK)
        if self.pos:
            f.seek(self.pos)
        return f

    def read(self, n: int = -1) -> bytes:
        if self.from_cache:
            data = self._src.read(n)
            self.pos += len(data)
            return data
        attempt = 0
        while True:
            try:
                data = self._src.read(n)
                break
            except (RayformError, KeyboardInterrupt):
                raise
            except Exception as e:  # a connection dropped, a 5xx: resume where it stopped
                self.failures += 1
                if attempt >= self.retry.attempts:
                    self.abort()
                    raise StoreError(
                        f"{self.what} ({self.digest[:16]}) from {self.store.display}: reading failed at byte "
                        f"{self.pos} of {self.size} after {attempt + 1} tries ({type(e).__name__}: {e})"
                    ) from e
                time.sleep(self.retry.delay(attempt))
                attempt += 1
                try:
                    self._src.close()
                except Exception:
                    pass
                try:
                    self._src = self._open_remote()
                except FileNotFoundError as nf:
                    self.abort()
                    raise NotFound(f"{self.what} ({self.digest[:16]}): not in {self.store.display}") from nf
                except Exception:
                    continue  # opening failed too: counts as a try, backs off again
        self.pos += len(data)
        self._hash.update(data)
        self._out.write(data)
        return data

    def finish(self) -> None:
        """Read what is left, verify, and (if it came from the store) keep it in the cache."""
        while self._src is not None and self.read(STREAM_BLOCK):
            pass
        if self.from_cache:
            self.close()
            return
        actual = self._hash.hexdigest()
        if actual != self.digest or self.pos != self.size:
            self.abort()
            raise IntegrityError(
                f"{self.what} ({self.digest[:16]}) from {self.store.display}: its {self.pos} bytes hash to "
                f"{actual[:16]}. The store's copy is corrupt; it was not cached"
            )
        self._out.close()
        self._out = None
        os.chmod(self._tmp, 0o644)
        os.replace(self._tmp, self._local)
        self._tmp = None
        self.close()

    def abort(self) -> None:
        """Drop what was written to the cache (a partial or bad shard is never kept)."""
        if self._out is not None:
            self._out.close()
            self._out = None
        if self._tmp is not None:
            unlink_if_present(self._tmp)
            self._tmp = None
        self.close()

    def close(self) -> None:
        if self._src is not None:
            try:
                self._src.close()
            finally:
                self._src = None


def open_shard(store: Store, digest: str, size: int, what: str, slice_id: str, fps: float,
               retry: Retry = Retry()) -> ShardStream:
    try:
        return ShardStream(store, digest, size, what, retry)
    except OfflineError as e:
        raise OfflineError(
            f"{slice_id}: {what} ({digest[:16]}) is not in the cache and RAYFORM_OFFLINE=1. "
            f"Run: rayform pull {slice_id} --fps {fps:g}"
        ) from e
