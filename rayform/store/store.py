"""The store: content-addressed blobs and small JSON refs on any fsspec filesystem.

Layout under the store's root::

    blobs/<aa>/<sha256>          every byte of data and every manifest, named by its hash
    refs/segments/<site>/<id>.json   a segment's versions, oldest first
    refs/slices/<slc_id>.json        slice id -> slice manifest blob
    refs/packs/<slc_id>/<key>.json   pack parameters -> pack manifest blob

A blob is written once and never changed: putting one that exists is a no-op. Every
write is atomic (a reader never sees a partial blob or ref) and every blob read whole is
verified against its name. Backends are fsspec's; this module only adds the rules. It knows
nothing of caches or offline use: that is the cached view's (``rayform.cache.store_view``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from rayform import config, names
from rayform.errors import (
    BlobNotFound,
    IntegrityError,
    NotFound,
    StoreError,
)
from rayform.store import listing, objectread
from rayform.store.atomic import OnMark, copy_atomic, move_atomic, remove_empty_dirs, sweep_temporaries, write_atomic
from rayform.store.backend import filesystem, redact, store_error, whole_read_options
from rayform.store.content import canonical_json, hash_file, sha256_hex
from rayform.store.freshness import Freshness, NewBlob, sweep_tombstones
from rayform.store.listing import StoredBlob
from rayform.untrusted import json_document

CHUNK = 4 << 20
STREAM_BLOCK = 8 << 20  # ranged block size where a blob is read through fsspec's file objects
# Filesystems whose single put is atomic: the object appears whole or not at all.
_ATOMIC_PUT = {"s3", "s3a", "gs", "gcs", "az", "abfs", "memory"}


class Store:
    """Blobs and refs on one fsspec URL (a local path, ``s3://bucket/prefix``, ``memory://x``)."""

    def __init__(self, url: str | os.PathLike[str] | None = None, storage_options: dict[str, Any] | None = None):
        url = os.fspath(url) if url is not None else config.store_url()
        self.storage_options = dict(storage_options or {})
        self.fs, root = filesystem(url, self.storage_options)
        self.protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.is_local = self.protocol in ("file", "local")
        self._whole = whole_read_options(self.protocol)
        self.root = root.rstrip("/") if not self.is_local else str(Path(root).resolve())
        self.url = self.root if self.is_local else url.rstrip("/")
        self.id = sha256_hex(redact(self.url).encode())[:16]  # names this store in the cache
        self._new_blobs: list[NewBlob] | None = None  # see ``recording_new_blobs``
        self.freshness = Freshness(self.fs, self.protocol, self.is_local)

    def __repr__(self) -> str:
        return f"Store({redact(self.url)!r})"

    @property
    def display(self) -> str:
        return redact(self.url)

    # -- paths -------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return f"{self.root}/{names.key(key)}"

    @staticmethod
    def blob_key(digest: str) -> str:
        names.digest(digest)
        return f"blobs/{digest[:2]}/{digest}"

    def blob_path(self, digest: str) -> str:
        return self._path(self.blob_key(digest))

    # -- blobs -------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        return bool(self._wrap_read(self.fs.exists, self.blob_path(digest)))

    def put_blob(self, data: bytes | memoryview) -> str:
        """Store ``data`` under its sha256 and return the hex digest. One that is there is not
        written again but freshened (``freshness``), so no deleter takes it from under us."""
        digest = sha256_hex(data)
        path = self.blob_path(digest)
        payload = bytes(data)
        if self.is_local:
            self._put(digest, path, lambda on_mark: self._local_write(write_atomic, path, payload, on_mark))
        else:
            self._put(digest, path, lambda _: self._put_remote(path, lambda target: self.fs.pipe_file(target, payload)))
        return digest

    def put_blob_file(self, local_path: str | os.PathLike[str], digest: str | None = None, *,
                      move: bool = False) -> str:
        """Store a local file as a blob, streamed, hashing it unless ``digest`` is given; with
        ``move``, a local store takes the file itself where it can (renamed, not copied)."""
        digest = digest or hash_file(Path(local_path))
        path = self.blob_path(digest)
        if self.is_local:
            write = move_atomic if move else copy_atomic
            self._put(digest, path, lambda on_mark: self._local_write(write, local_path, path, on_mark))
        else:
            source = os.fspath(local_path)
            self._put(digest, path, lambda _: self._put_remote(path, lambda target: self.fs.put_file(source, target)))
        return digest

    def _put(self, digest: str, path: str, write: Callable[[OnMark | None], None]) -> None:
        """Freshen the blob at ``path`` if it is there, else ``write`` it, recording either (a
        local write says its mark before the blob takes its name: a writer stopped at any point
        knows what to take back)."""
        if self._exists_for_write(path):
            found, mark = self._wrap(self.freshness.freshen, path, lambda: write(None))
            if found:
                self._wrote(NewBlob(digest, mark, new=False))
                return
        recording = self._new_blobs
        if recording is None:
            write(None)
            return
        at = len(recording)
        recording.append(NewBlob(digest, None))  # a remote write's mark is known once it is done

        def on_mark(mark: int) -> None:
            recording[at] = NewBlob(digest, mark)

        write(on_mark)
        if not self.is_local:
            recording[at] = NewBlob(digest, self._wrap(self.freshness.mark, path))

    @contextlib.contextmanager
    def recording_new_blobs(self) -> Iterator[list[NewBlob]]:
        """While held, the blobs this object writes that were not in the store before and those
        it finds there and freshens, each with the mark that left (what a failed writer takes
        back: ``take_back``)."""
        outer, self._new_blobs = self._new_blobs, []
        try:
            yield self._new_blobs
        finally:
            if outer is not None:
                outer.extend(self._new_blobs)
            self._new_blobs = outer

    def _wrote(self, new: NewBlob) -> None:
        if self._new_blobs is not None:
            self._new_blobs.append(new)

    def take_back(self, blobs: Iterable[NewBlob]) -> int:
        """Delete the blobs a failed writer (all its processes' records together) wrote new, but
        those another writer has freshened since (``freshness``); then the folders that leaves
        empty. Returns how many went."""
        try:
            gone = self.freshness.take_back_all(self.blob_path, blobs)
        except Exception as e:
            raise store_error(self.display, "cannot take back the blobs of a failed write", e) from e
        self.remove_empty_folders()
        return gone

    def get_blob(self, digest: str) -> bytes:
        """The blob's bytes, verified against its name."""
        data = self._read(self.blob_path(digest), digest)
        actual = sha256_hex(data)
        if actual != digest:
            raise IntegrityError(
                f"blob {digest[:16]} in {self.display}: its bytes hash to {actual[:16]}. "
                "The stored copy is corrupt; re-create it from its source"
            )
        return data

    def open_blob(self, digest: str) -> IO[bytes]:
        """A raw stream of a blob, NOT verified: the caller hashes what it reads."""
        try:
            stream: IO[bytes] = self._wrap_read(self.fs.open, self.blob_path(digest), "rb", CHUNK)
            return stream
        except FileNotFoundError as e:
            raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}") from e

    def read_from(self, digest: str, start: int, timeout_s: float = objectread.TIMEOUT_S) -> objectread.SequentialRead:
        """A raw reader of a blob from byte ``start`` to its end (one streaming request where
        the store allows it), NOT verified: the caller hashes what it reads."""
        return objectread.open_at(self.fs, self.blob_path(digest), start, STREAM_BLOCK, timeout_s)

    def presign(self, digests: Iterable[str]) -> None:
        """Sign read URLs for these blobs now, where the store signs them (``objectread``): a
        DataLoader worker forked later finds them signed and makes its first request at once."""
        for digest in digests:
            objectread.direct_url(self.fs, self.blob_path(digest))

    def read_range(self, digest: str, start: int, size: int) -> bytes:
        """``size`` bytes of a blob from byte ``start`` (fewer where it ends sooner), NOT
        verified: the caller checks them; a backend's failure is one StoreError."""
        def read() -> bytes:
            reader = self.read_from(digest, start)
            try:
                chunks, left = [], size
                while left and (chunk := reader.read(left)):
                    chunks.append(chunk)
                    left -= len(chunk)
                return b"".join(chunks)
            finally:
                reader.close()

        try:
            data: bytes = self._wrap_read(read)
            return data
        except FileNotFoundError as e:
            raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}") from e

    def blob_size(self, digest: str) -> int:
        try:
            return int(self._wrap_read(self.fs.size, self.blob_path(digest)))
        except FileNotFoundError as e:
            raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}") from e

    def list_blobs(self) -> Iterator[StoredBlob]:
        """Every blob the store holds: its digest, size and when it was written (None where
        the backend does not say). A name that is not a blob's (a temporary, a stray file)
        is left out: a listing is untrusted input."""
        base = f"{self.root}/blobs"
        try:
            found = self._wrap_read(self.fs.find, base, None, False, True)  # maxdepth, withdirs, detail
        except FileNotFoundError:
            return
        yield from listing.blobs(found)

    def delete_blob(self, digest: str) -> None:
        """Remove a blob nothing else can name (a pack's scratch run, unique by its nonce);
        what others may share goes through ``take_back`` or ``collect_blob``."""
        path = self.blob_path(digest)
        try:
            self.fs.rm_file(path)
        except (FileNotFoundError, NotADirectoryError):  # not there: nothing to delete
            pass
        except Exception as e:
            raise store_error(self.display, f"cannot delete blob {digest[:16]}", e) from e

    def confirm_blob(self, digest: str) -> bool:
        """A blob a writer stored or found, freshened right before the commit that names it
        (``freshness.confirm``): False if it is gone."""
        try:
            return self.freshness.confirm(self.blob_path(digest))
        except Exception as e:
            raise store_error(self.display, f"cannot confirm blob {digest[:16]}", e) from e

    def collect_blob(self, digest: str, cutoff: float) -> bool:
        """Delete an unreachable blob (``rayform gc`` only) unless it was written or freshened
        after ``cutoff`` (seconds since the epoch). True if it was deleted."""
        try:
            return self.freshness.collect(self.blob_path(digest), cutoff)
        except Exception as e:
            raise store_error(self.display, f"cannot delete blob {digest[:16]}", e) from e

    def remove_empty_folders(self) -> None:
        """Remove the ``blobs/<aa>/`` folders of a local store that hold nothing (what a take-back
        or gc leaves); one a writer fills meanwhile stays (``atomic.remove_empty_dirs``)."""
        if self.is_local:
            remove_empty_dirs(f"{self.root}/blobs")

    def get_json_blob(self, digest: str, what: str = "manifest") -> dict[str, Any]:
        """A JSON object stored as a blob (verified, then parsed as untrusted)."""
        return json_document(self.get_blob(digest), f"{what} {digest[:16]} in {self.display}")

    def put_json_blob(self, obj: Any) -> str:
        return self.put_blob(canonical_json(obj))

    # -- refs --------------------------------------------------------------------------
    def get_ref(self, key: str, parse: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        """A small JSON document at ``key``, or what ``parse`` makes of it; NotFound if absent,
        Malformed if not a JSON object (or if ``parse`` refuses it)."""
        return self.parse_ref(key, self.get_ref_bytes(key), parse)

    def get_ref_bytes(self, key: str) -> bytes:
        """A ref's bytes as stored (not parsed: see ``parse_ref``)."""
        return self._read(self._path(key), key)

    def parse_ref(self, key: str, data: bytes, parse: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        doc = json_document(data, f"ref {key} in {self.display}")
        return parse(doc) if parse is not None else doc

    def put_ref(self, key: str, obj: Any) -> None:
        self._write_atomic(self._path(key), canonical_json(obj))

    def has_ref(self, key: str) -> bool:
        return bool(self._wrap_read(self.fs.exists, self._path(key)))

    def delete_ref(self, key: str) -> None:
        """Remove a ref (a catalog part that a compacted one stands for: nothing else is removed)."""
        try:
            self.fs.rm_file(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            pass
        except Exception as e:
            raise store_error(self.display, f"cannot remove ref {key[:80]}", e) from e

    def list_refs(self, prefix: str) -> Iterator[str]:
        """Keys of the refs below ``prefix`` (recursively), sorted.

        A key that is not a rayform name (``..``, a leading dot, odd characters) is skipped
        with a warning: a listing is untrusted input.
        """
        base = self._path(prefix).rstrip("/")
        try:
            found = self._wrap_read(self.fs.find, base)
        except FileNotFoundError:
            found = []
        if not found:
            self._check_exists()
        return iter(listing.ref_keys(found, self.root, prefix, self.display))

    @property
    def missing(self) -> bool:
        """True for a local store whose directory does not exist (nothing was ever written to it:
        the first write makes it). Where a store is only read, that is a mistyped path."""
        return self.is_local and not os.path.isdir(self.root)

    def sweep_temporaries(self) -> int:
        """Delete what killed writers left in a local store (ours only, stale only), and put back
        what a killed deleter had moved aside (``freshness.sweep_tombstones``)."""
        if not self.is_local:
            return 0
        sweep_tombstones(self.root)
        return sweep_temporaries(self.root)

    # -- internals ---------------------------------------------------------------------
    def _check_exists(self) -> None:
        """An empty listing of a store whose bucket (or directory) does not exist is an error."""
        if self.is_local or self.protocol in ("memory", "http", "https"):
            return
        bucket = self.root.split("/", 1)[0]
        if not self._wrap_read(self.fs.exists, bucket):
            raise StoreError(f"{self.display}: no such bucket ({bucket}). Create it, or check the store URL")

    def _exists_for_write(self, path: str) -> bool:
        try:
            return bool(self.fs.exists(path))
        except Exception as e:
            raise store_error(self.display, "cannot reach the store", e) from e

    def _read(self, path: str, what: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(path, **self._whole))
        except FileNotFoundError as e:
            cls = BlobNotFound if path.startswith(f"{self.root}/blobs/") else NotFound
            raise cls(f"{what[:40]}: not in {self.display}") from e
        except (IsADirectoryError, NotADirectoryError) as e:
            raise NotFound(f"{what[:40]}: not in {self.display}") from e
        except Exception as e:
            raise store_error(self.display, f"cannot read {what[:40]}", e) from e

    def _wrap_read(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except FileNotFoundError:
            raise
        except Exception as e:
            raise store_error(self.display, "cannot read", e) from e

    def _local_write(self, write: Callable[..., Any], *args: Any) -> Any:
        try:
            return write(*args)
        except OSError as e:
            raise StoreError(f"{self.display}: cannot write ({e.strerror or e}). Pass a writable directory "
                             "(--store, RAYFORM_STORE) and check its free space") from None

    def _write_atomic(self, path: str, data: bytes) -> None:
        if self.is_local:
            self._local_write(write_atomic, path, data)
        else:
            self._put_remote(path, lambda target: self.fs.pipe_file(target, data))

    def _put_remote(self, path: str, put: Callable[[str], Any]) -> None:
        """``put(target)`` made atomic: straight to ``path`` where one put is, else to a
        temporary beside it, then moved into place."""
        if self.protocol in _ATOMIC_PUT:
            self._wrap(put, path)
            return
        tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
        self._wrap(put, tmp)
        self._wrap(self.fs.mv, tmp, path)

    def _wrap(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            raise store_error(self.display, "write failed", e) from e
