"""The store: content-addressed blobs and small JSON refs on any fsspec filesystem.

Layout under the store's root::

    blobs/<aa>/<sha256>          every byte of data and every manifest, named by its hash
    refs/segments/<site>/<id>.json   a segment's versions, oldest first
    refs/slices/<slc_id>.json        slice id -> slice manifest blob
    refs/packs/<slc_id>/<key>.json   pack parameters -> pack manifest blob

A blob is written once and never changed: putting one that exists is a no-op. Every
write is atomic (a reader never sees a partial blob or ref) and every blob read is
verified against its name. Backends are fsspec's; this module only adds the rules.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import fsspec

from rayform import config, names
from rayform.errors import (
    BlobNotFound,
    IntegrityError,
    InvalidInput,
    NotFound,
    OfflineError,
    StoreError,
)
from rayform.store.cache import ShardCache
from rayform.store.files import (
    canonical_json,
    copy_atomic,
    hash_file,
    sha256_hex,
    sweep_temporaries,
    verify_once,
    write_atomic,
)
from rayform.untrusted import json_document

log = logging.getLogger("rayform")

CHUNK = 4 << 20
# Filesystems whose single put is atomic: the object appears whole or not at all.
_ATOMIC_PUT = {"s3", "s3a", "gs", "gcs", "az", "abfs", "memory"}


def redact(url: str) -> str:
    """A URL fit for messages and logs: any user:password part removed."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=host))
    return url


@dataclass(frozen=True)
class StoreRef:
    """What it takes to open a store again in another process: picklable, no open handles."""

    url: str
    storage_options: dict = field(default_factory=dict, compare=False, repr=False)
    cache_dir: str | None = None

    def open(self) -> Store:
        return Store(self.url, self.storage_options, ShardCache(self.cache_dir) if self.cache_dir else None)


class Store:
    """Blobs and refs on one fsspec URL (a local path, ``s3://bucket/prefix``, ``memory://x``).

    A store that is not a local directory reads through a :class:`ShardCache`: blobs are
    fetched once into it and refs are copied there, so that with ``RAYFORM_OFFLINE=1``
    everything already fetched is still readable and nothing else is.
    """

    def __init__(
        self,
        url: str | os.PathLike | None = None,
        storage_options: dict | None = None,
        cache: ShardCache | None = None,
    ):
        url = os.fspath(url) if url is not None else config.store_url()
        self.storage_options = dict(storage_options or {})
        self.fs, root = _filesystem(url, self.storage_options)
        self.protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.is_local = self.protocol in ("file", "local")
        self.root = root.rstrip("/") if not self.is_local else str(Path(root).resolve())
        self.url = self.root if self.is_local else url.rstrip("/")
        if self.is_local:
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as e:
                raise StoreError(f"store {self.root}: cannot be made ({e.strerror or e}). "
                                 "Pass a writable directory (--store, or RAYFORM_STORE)") from None
        self.cache = None if self.is_local else (cache or ShardCache())
        self.id = sha256_hex(redact(self.url).encode())[:16]  # names this store in the cache

    def __repr__(self) -> str:
        return f"Store({redact(self.url)!r})"

    @property
    def ref(self) -> StoreRef:
        return StoreRef(self.url, self.storage_options, str(self.cache.root) if self.cache else None)

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

    @property
    def offline(self) -> bool:
        return not self.is_local and config.offline()

    def _guard_offline(self) -> None:
        if self.offline:
            raise OfflineError(
                f"{self.display}: RAYFORM_OFFLINE=1 forbids reading a non-local store. "
                "Unset RAYFORM_OFFLINE, or run `rayform pull <slice>` first"
            )

    def _guard_offline_write(self) -> None:
        if self.offline:
            raise OfflineError(
                f"{self.display}: RAYFORM_OFFLINE=1 forbids writing to a non-local store. "
                "Unset RAYFORM_OFFLINE to write to it, or use a local store (--store DIR)"
            )

    # -- blobs -------------------------------------------------------------------------
    def has_blob(self, digest: str) -> bool:
        if self.offline:
            return self.cache.has(digest)
        return self._wrap_read(self.fs.exists, self.blob_path(digest))

    def put_blob(self, data: bytes | memoryview) -> str:
        """Store ``data`` under its sha256 and return the hex digest (a no-op if present)."""
        self._guard_offline_write()
        digest = sha256_hex(data)
        path = self.blob_path(digest)
        if not self._exists_for_write(path):
            self._write_atomic(path, bytes(data))
        return digest

    def put_blob_file(self, local_path: str | os.PathLike, digest: str | None = None) -> str:
        """Store a local file as a blob, streamed, hashing it unless ``digest`` is given."""
        self._guard_offline_write()
        digest = digest or hash_file(Path(local_path))
        path = self.blob_path(digest)
        if self._exists_for_write(path):
            return digest
        if self.is_local:
            self._local_write(copy_atomic, local_path, path)
        elif self.protocol in _ATOMIC_PUT:
            self._wrap(self.fs.put_file, os.fspath(local_path), path)
        else:
            tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
            self._wrap(self.fs.put_file, os.fspath(local_path), tmp)
            self._wrap(self.fs.mv, tmp, path)
        return digest

    def get_blob(self, digest: str) -> bytes:
        """The blob's bytes, verified against its name."""
        if self.cache is not None:
            return self.local_blob_path(digest).read_bytes()
        data = self._read(self.blob_path(digest), digest)
        actual = sha256_hex(data)
        if actual != digest:
            raise IntegrityError(
                f"blob {digest[:16]} in {self.display}: its bytes hash to {actual[:16]}. "
                "The stored copy is corrupt; re-create it from its source"
            )
        return data

    def local_blob_path(self, digest: str) -> Path:
        """A local file holding the blob, verified (once per process) before it is returned.

        For a local store that is the blob itself; otherwise its copy in the cache, fetched
        on first use. A bad cached copy is replaced; a bad blob in a local store is an error.
        """
        if self.cache is not None:
            if self.offline and not self.cache.has(digest):
                raise OfflineError(
                    f"blob {digest[:16]} of {self.display}: not in the cache {self.cache.root} and "
                    "RAYFORM_OFFLINE=1. Run: rayform pull <slice>"
                )
            try:
                return self.cache.ensure(self, digest)
            except FileNotFoundError as e:
                raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}") from e
        path = Path(self.blob_path(digest))
        if not path.is_file():
            raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}")
        if not verify_once(path, digest):
            raise IntegrityError(
                f"blob {digest[:16]} in {self.display}: its bytes do not match its name. "
                "The stored copy is corrupt; re-create it from its source"
            )
        return path

    def open_blob(self, digest: str) -> IO[bytes]:
        """A raw stream of a blob, NOT verified: the caller hashes what it reads."""
        try:
            return self._wrap_read(self.fs.open, self.blob_path(digest), "rb", CHUNK)
        except FileNotFoundError as e:
            raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}") from e

    def blob_size(self, digest: str) -> int:
        try:
            return int(self._wrap_read(self.fs.size, self.blob_path(digest)))
        except FileNotFoundError as e:
            raise BlobNotFound(f"blob {digest[:16]}: not in {self.display}") from e

    def get_json_blob(self, digest: str, what: str = "manifest") -> dict[str, Any]:
        """A JSON object stored as a blob (verified, then parsed as untrusted)."""
        return json_document(self.get_blob(digest), f"{what} {digest[:16]} in {self.display}")

    def put_json_blob(self, obj: Any) -> str:
        return self.put_blob(canonical_json(obj))

    # -- refs --------------------------------------------------------------------------
    def get_ref(self, key: str, parse: Callable[[dict[str, Any]], Any] | None = None) -> Any:
        """A small JSON document at ``key``, or what ``parse`` makes of it; NotFound if absent,
        Malformed if not a JSON object (or if ``parse`` refuses it).

        A remote store's refs are copied into the cache as they are read (only once they
        parse), and read from there when offline.
        """
        what = f"ref {key} in {self.display}"
        parse = parse or (lambda doc: doc)
        if self.cache is None:
            return parse(json_document(self._read(self._path(key), key), what))
        if self.offline:
            cached = self.cache.get_ref(self.id, key)
            if cached is None:
                raise OfflineError(
                    f"{key.rsplit('/', 1)[-1].removesuffix('.json')}: not in the cache {self.cache.root} "
                    f"and RAYFORM_OFFLINE=1. Run: rayform pull <slice>"
                )
            return parse(cached)
        data = self._read(self._path(key), key)
        parsed = parse(json_document(data, what))  # a ref that does not parse never reaches the cache
        if self.cache.get_ref(self.id, "store.json") is None:  # lets `rayform cache` name the store
            self.cache.put_ref(self.id, "store.json", canonical_json({"url": self.display}))
        self.cache.put_ref(self.id, key, data)
        return parsed

    def put_ref(self, key: str, obj: Any) -> None:
        self._guard_offline_write()
        self._write_atomic(self._path(key), canonical_json(obj))

    def has_ref(self, key: str) -> bool:
        if self.offline:
            return self.cache.get_ref(self.id, key) is not None
        return self._wrap_read(self.fs.exists, self._path(key))

    def list_refs(self, prefix: str) -> Iterator[str]:
        """Keys of the refs below ``prefix`` (recursively), sorted.

        A key that is not a rayform name (``..``, a leading dot, odd characters) is skipped
        with a warning: a listing is untrusted input. Offline, the refs this cache holds of
        the store are listed; a cache that never saw the store is an OfflineError.
        """
        if self.offline:
            if not self.cache.has_store(self.id):
                raise OfflineError(
                    f"{self.display}: nothing of this store is in the cache {self.cache.root}, and "
                    "RAYFORM_OFFLINE=1 forbids listing it. Unset RAYFORM_OFFLINE, or run `rayform pull <slice>` first"
                )
            return self.cache.list_refs(self.id, prefix)
        base = self._path(prefix).rstrip("/")
        try:
            found = self._wrap_read(self.fs.find, base)
        except FileNotFoundError:
            found = []
        if not found:
            self._check_exists()
        root = self.root.rstrip("/") + "/"
        keys = []
        for path in found:
            rel = path[len(root):] if path.startswith(root) else path
            if not rel.endswith(".json") or os.path.basename(rel).startswith("."):
                continue
            if names.is_key(rel) and rel.startswith(prefix.rstrip("/") + "/"):
                keys.append(rel)
            else:
                log.warning("rayform: %s: ignoring the key %r (not a rayform name)", self.display, rel[:120])
        return iter(sorted(keys))

    def sweep_temporaries(self) -> int:
        """Delete what killed writers left in a local store (ours only, stale only)."""
        return sweep_temporaries(self.root) if self.is_local else 0

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
            return self.fs.exists(path)
        except Exception as e:
            raise _store_error(self.display, "cannot reach the store", e) from e

    def _read(self, path: str, what: str) -> bytes:
        self._guard_offline()
        try:
            return self.fs.cat_file(path)
        except FileNotFoundError as e:
            cls = BlobNotFound if path.startswith(f"{self.root}/blobs/") else NotFound
            raise cls(f"{what[:40]}: not in {self.display}") from e
        except (IsADirectoryError, NotADirectoryError) as e:
            raise NotFound(f"{what[:40]}: not in {self.display}") from e
        except Exception as e:
            raise _store_error(self.display, f"cannot read {what[:40]}", e) from e

    def _wrap_read(self, fn, *args):
        self._guard_offline()
        try:
            return fn(*args)
        except FileNotFoundError:
            raise
        except Exception as e:
            raise _store_error(self.display, "cannot read", e) from e

    def _local_write(self, write, *args) -> None:
        try:
            write(*args)
        except OSError as e:
            raise StoreError(f"{self.display}: cannot write ({e.strerror or e}). "
                             "Check the directory's permissions and free space") from None

    def _write_atomic(self, path: str, data: bytes) -> None:
        self._guard_offline_write()
        if self.is_local:
            self._local_write(write_atomic, path, data)
        elif self.protocol in _ATOMIC_PUT:
            self._wrap(self.fs.pipe_file, path, data)
        else:
            tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
            self._wrap(self.fs.pipe_file, tmp, data)
            self._wrap(self.fs.mv, tmp, path)

    def _wrap(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise _store_error(self.display, "write failed", e) from e


def _filesystem(url: str, storage_options: dict) -> tuple[Any, str]:
    try:
        return fsspec.core.url_to_fs(url, **storage_options)
    except ImportError as e:
        raise InvalidInput(f"store {redact(url)}: its filesystem is not installed ({e}). "
                           "For s3:// run: pip install 'rayform[s3]'") from None
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"store {redact(url)}: not a store URL fsspec can open ({e})") from None


def _store_error(display: str, doing: str, e: BaseException) -> StoreError:
    """One line for a failure of the store's backend (credentials, permissions, network)."""
    kind = type(e).__name__
    text = str(e).split("\n", 1)[0][:200]
    fix = {
        "NoCredentialsError": "set AWS credentials (env, ~/.aws, or storage options key/secret)",
        "PermissionError": "check the credentials and the bucket's permissions",
        "EndpointConnectionError": "check the endpoint URL and the network",
        "ClientConnectorError": "check the endpoint URL and the network",
        "ConnectionError": "check the endpoint URL and the network",
    }.get(kind, "check the store URL, credentials and network")
    return StoreError(f"{display}: {doing} ({kind}: {text}). {fix[0].upper() + fix[1:]}")
