"""Bundles: many small blobs stored as one, as git packs its loose objects.

An ingest of many episodes would otherwise write a few small blobs an episode (its manifest,
its timestamps, its arrays): millions of objects for a million episodes, each one request to
write, list, copy and delete. A bundle holds them together and is itself a blob, named by
the sha256 of its bytes; each member keeps its own name (the sha256 of its own bytes), so a
segment manifest names its data as before and a member is verified on its own when read.

Layout::

    b"RFBUNDLE\\x01\\n"          magic and version (10 bytes)
    u64 little-endian            bytes of the index that follows
    index                        npy, uint64 (members, 6): a member's digest (its 32 bytes as
                                 four little-endian words), offset, size; sorted by digest
    members                      each member's bytes, in index order, offsets from here

Nothing is compressed, so a member is a slice of the bundle (of a memory map, read where
it lies). A bundle is untrusted like any blob: the index is checked (sorted, unique, every
member inside the bytes) before it is used, and a member's bytes hash to its name or are
refused.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from rayform.codec import records
from rayform.errors import IntegrityError, Malformed
from rayform.store.content import canonical_json, sha256_hex

MAGIC = b"RFBUNDLE\x01\n"
INDEX_COLUMNS = 6  # digest (4 words), offset, size
SMALL = 256 << 10  # a blob this size or smaller goes in the bundle; larger ones stay loose
BUNDLE_BYTES = 64 << 20  # a bundle is written out once its members reach this size
_HEAD = len(MAGIC) + 8


class BlobSink(Protocol):
    """Where loose blobs and finished bundles are written (a store)."""

    def put_blob(self, data: bytes | memoryview) -> str: ...


def pack_members(members: dict[str, bytes]) -> bytes:
    """The bytes of a bundle of ``members`` (digest -> bytes): the same members, the same bytes."""
    digests = sorted(members)
    index = np.zeros((len(digests), INDEX_COLUMNS), "<u8")
    if digests:
        index[:, :4] = np.frombuffer(b"".join(bytes.fromhex(d) for d in digests), "<u8").reshape(-1, 4)
        sizes = np.array([len(members[d]) for d in digests], "<u8")
        index[:, 5] = sizes
        index[1:, 4] = np.cumsum(sizes)[:-1]
    head = records.to_npy(index)
    return b"".join([MAGIC, struct.pack("<Q", len(head)), head, *(members[d] for d in digests)])


class BundleWriter:
    """Collects the small blobs written through it into bundles; a larger one goes to the
    store as it is. ``put_blob`` returns the digest either way, so a segment writer writes
    through it as through a store. ``flush`` writes what is collected as one bundle blob."""

    def __init__(self, store: BlobSink, small: int = SMALL, bundle_bytes: int = BUNDLE_BYTES):
        self.store = store
        self.small, self.bundle_bytes = small, bundle_bytes
        self._members: dict[str, bytes] = {}
        self._bytes = 0
        self.bundles: list[str] = []  # written so far, in order

    def put_blob(self, data: bytes | memoryview) -> str:
        if len(data) > self.small:
            return self.store.put_blob(data)
        digest = sha256_hex(data)
        if digest not in self._members:
            self._members[digest] = bytes(data)
            self._bytes += len(data)
        return digest

    def put_json_blob(self, obj: Any) -> str:
        return self.put_blob(canonical_json(obj))

    @property
    def pending(self) -> int:
        """Bytes collected and not yet written (``full`` once they reach ``bundle_bytes``)."""
        return self._bytes

    @property
    def full(self) -> bool:
        return self._bytes >= self.bundle_bytes

    def holds(self, digest: str) -> bool:
        return digest in self._members

    def flush(self) -> str | None:
        """Write the collected members as one bundle; its digest (None if nothing was collected)."""
        if not self._members:
            return None
        digest = self.store.put_blob(pack_members(self._members))
        self._members, self._bytes = {}, 0
        self.bundles.append(digest)
        return digest


class Bundle:
    """A bundle's members, read out of its bytes (``bytes``, or a read-only memory map)."""

    def __init__(self, digest: str, data: bytes | memoryview | Any):
        self.digest = digest
        self._data = memoryview(data)
        what = f"bundle {digest[:16]}"
        if len(self._data) < _HEAD or bytes(self._data[: len(MAGIC)]) != MAGIC:
            raise Malformed(f"{what}: not a rayform bundle")
        (index_bytes,) = struct.unpack("<Q", self._data[len(MAGIC):_HEAD])
        if index_bytes > len(self._data) - _HEAD:
            raise Malformed(f"{what}: its index claims {index_bytes} bytes of {len(self._data)}")
        index = records.from_npy(self._data[_HEAD:_HEAD + index_bytes], f"{what} index")
        if index.dtype != np.dtype("<u8") or index.ndim != 2 or index.shape[1] != INDEX_COLUMNS:
            raise Malformed(f"{what}: its index is {index.dtype} {index.shape}, not the members' table")
        self._base = _HEAD + index_bytes
        room = len(self._data) - self._base
        offsets, sizes = index[:, 4], index[:, 5]
        keys = np.ascontiguousarray(index[:, :4]).view("S32").ravel()
        # each bound on its own first: offset + size cannot wrap around 2^64 once both are in the bytes
        if len(index) and (np.any(sizes > room) or np.any(offsets > room) or np.any(offsets + sizes > room)):
            raise Malformed(f"{what}: its index names members outside its bytes")
        if np.any(keys[1:] <= keys[:-1]):
            raise Malformed(f"{what}: its index is not sorted by digest, or names a member twice")
        if np.any(offsets[1:] < offsets[:-1] + sizes[:-1]):
            raise Malformed(f"{what}: its index has members overlapping or out of order in its bytes")
        self._keys, self._offsets, self._sizes = keys, offsets, sizes

    def check(self) -> None:
        """Every member's bytes hash to its name (``IntegrityError`` naming the first that does not)."""
        for digest in self.digests():
            self.get(digest)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and self._find(digest) is not None

    def digests(self) -> Iterator[str]:
        for key in self._keys.tolist():
            yield key.ljust(32, b"\0").hex()

    def get(self, digest: str) -> memoryview:
        """A member's bytes, verified against its name (a view of the bundle's)."""
        i = self._find(digest)
        if i is None:
            raise KeyError(digest)
        start = self._base + int(self._offsets[i])
        view = self._data[start:start + int(self._sizes[i])]
        if hashlib.sha256(view).hexdigest() != digest:
            raise IntegrityError(f"bundle {self.digest[:16]}: member {digest[:16]} does not hash to its name. "
                                 "The stored copy is corrupt; re-create it from its source")
        return view

    def _find(self, digest: str) -> int | None:
        try:
            key = bytes.fromhex(digest) if isinstance(digest, str) and len(digest) == 64 else None
        except ValueError:
            return None
        if key is None or not len(self._keys):
            return None
        i = int(self._keys.searchsorted(key))
        # numpy keeps a bytes value without its trailing NULs: compare it so
        return i if i < len(self._keys) and self._keys[i] == key.rstrip(b"\0") else None
