"""Writing shards: samples into byte-identical WebDataset tar files, with offset indexes.

Tars are what webdataset's ``TarWriter`` writes with everything that could vary pinned
(mtime 0, empty user and group, mode 0444, USTAR headers, a sample's members in sorted
order), byte for byte (``tests/packer/test_pack.py`` writes the same samples both ways), so the same
samples always give the same bytes and hence the same shard name. The headers come from one
header that the standard library's ``tarfile`` makes, with each member's name, size and
checksum put in: ``TarWriter`` spends about 100 µs a sample in ``tarfile``'s header code, a
fifth of packing small samples, where this takes 14. While writing, we note where each
member's data starts, so a reader can take a sample out of a shard by offset, with no tar
parsing.
"""

from __future__ import annotations

import builtins
import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeAlias, TypeVar

import numpy as np

from rayform.errors import InvalidInput

BLOCK = 512
NAME_MAX = 99  # USTAR keeps a name in one 100-byte field
CHUNK_BYTES = 1 << 20  # a streamed shard is verified chunk by chunk, each of this size (the last shorter)


RECORD = 20 * BLOCK  # tarfile pads the end of an archive to a whole record
_ZEROS = memoryview(bytes(BLOCK))
Buffer: TypeAlias = "bytes | memoryview"  # a member's bytes, or a view of them where they already lie


Size = TypeVar("Size", int, np.ndarray)


def padded(size: Size) -> Size:
    """A member's size rounded up to whole tar blocks (elementwise for an array of sizes)."""
    return (size + BLOCK - 1) // BLOCK * BLOCK


def _template() -> bytes:
    import tarfile

    info = tarfile.TarInfo("x")
    info.size, info.mtime, info.mode, info.uname, info.gname = 0, 0, 0o444, "", ""
    return info.tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")


_TEMPLATE = _template()


def member_header(name: str, size: int) -> bytes:
    """The USTAR header ``tarfile`` writes for a member ``name`` of ``size`` bytes, with the
    fields ``TarWriter`` is given pinned (``name`` plain ASCII of at most ``NAME_MAX``)."""
    header = bytearray(_TEMPLATE)
    encoded = name.encode("ascii")
    header[0:100] = encoded + bytes(100 - len(encoded))
    header[124:136] = b"%011o\0" % size
    header[148:156] = b"        "  # the checksum counts its own field as spaces
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


class _HashingFile:
    """A write-only file that hashes what passes through it: whole, and per chunk."""

    def __init__(self, path: str, chunk_bytes: int):
        self._f = open(path, "wb")
        self.chunk_bytes = chunk_bytes
        self.sha256 = hashlib.sha256()
        self.size = 0
        self._chunk = hashlib.sha256()
        self._chunk_fill = 0
        self._chunks: list[bytes] = []

    def write(self, data: bytes | memoryview) -> int:
        self.write_all([data])
        return len(data)

    def write_all(self, buffers: list[bytes | memoryview]) -> None:
        """``buffers`` one after another (one call a sample: this is packing's inner loop)."""
        for data in buffers:
            n = len(data)
            self.sha256.update(data)
            self.size += n
            if self._chunk_fill + n < self.chunk_bytes:  # within the chunk: the common case
                self._chunk.update(data)
                self._chunk_fill += n
                continue
            view = memoryview(data)
            while view:
                take = min(len(view), self.chunk_bytes - self._chunk_fill)
                self._chunk.update(view[:take])
                self._chunk_fill += take
                view = view[take:]
                if self._chunk_fill == self.chunk_bytes:
                    self._chunks.append(self._chunk.digest())
                    self._chunk, self._chunk_fill = hashlib.sha256(), 0
        self._f.writelines(buffers)

    def chunk_digests(self) -> bytes:
        """The sha256 of every ``chunk_bytes`` of what was written (the last chunk shorter), joined."""
        tail = [self._chunk.digest()] if self._chunk_fill else []
        return b"".join(self._chunks + tail)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


@dataclass(frozen=True)
class ShardFile:
    """A finished shard on local disk, before it is stored."""

    path: str
    sha256: str
    bytes: int
    samples: int
    # (samples, 2 + 2*members): sample start, end, (a video pack's: place in the clip,) then (offset, size) per member
    index: np.ndarray
    chunks: builtins.bytes  # sha256 of each chunk of the shard, 32 bytes each


class ShardWriter:
    """Rolls samples into shards of about ``target_bytes``; yields each shard as it closes."""

    def __init__(self, directory: str, target_bytes: int, members: list[str], chunk_bytes: int | None = None,
                 shared: frozenset[str] = frozenset()):
        """``shared``: members (a video pack's clips) that a sample given them empty shares with
        the last sample before it in the shard that had them: no tar member is written, and its
        index row points at that one's and says how many samples after it it is (``pack.layout``)."""
        self.directory = directory
        self.shared = shared
        self._owner: dict[str, tuple[int, int, int]] = {}  # shared member -> (offset, size, its sample's start)
        self._first: dict[str, int] = {}  # shared member -> the row of the sample that holds it
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.target_bytes = target_bytes
        self.members = sorted(members)  # TarWriter writes a sample's members in sorted order
        self._n = 0
        self._file: _HashingFile | None = None  # the open shard
        self._rows: list[list[int]] = []

    def add(self, key: str, sample: Mapping[str, bytes | memoryview]) -> Iterator[ShardFile]:
        if sorted(sample) != self.members:
            raise InvalidInput(f"sample {key}: members {sorted(sample)} differ from {self.members}")
        if self._file is None:
            self._open()
        f = self._file
        assert f is not None
        row = [f.size, 0] + ([0] if self.shared else [])
        at = f.size
        buffers: list[bytes | memoryview] = []
        for m in self.members:
            name = f"{key}.{m}"
            if len(name) > NAME_MAX or not name.isascii():
                raise InvalidInput(f"tar member {name!r}: longer than {NAME_MAX} characters or not ASCII; "
                                   "shorten the stream name")
            data = sample[m]
            n = len(data)
            if m in self.shared:
                if not n:
                    if m not in self._owner:
                        raise InvalidInput(f"sample {key}: shares the {m} of no sample before it in its shard")
                    offset, size, start = self._owner[m]
                    row += [offset, size]
                    row[0] = min(row[0], start)
                    row[2] = len(self._rows) - self._first[m]
                    continue
                self._owner[m] = (at + BLOCK, n, row[0])
                self._first[m] = len(self._rows)
            buffers += (member_header(name, n), data)
            row += [at + BLOCK, n]
            at += BLOCK + padded(n)
            if padded(n) > n:
                buffers.append(_ZEROS[:padded(n) - n])
        f.write_all(buffers)
        row[1] = f.size
        self._rows.append(row)
        if row[1] >= self.target_bytes:
            yield self._close()

    def finish(self) -> Iterator[ShardFile]:
        if self._file is not None:
            yield self._close()

    def _open(self) -> None:
        path = os.path.join(self.directory, f"shard-{self._n:06d}.tar")
        self._n += 1
        self._file = _HashingFile(path, self.chunk_bytes)
        self._path = path
        self._rows = []
        self._owner, self._first = {}, {}

    def _close(self) -> ShardFile:
        f = self._file
        assert f is not None
        f.write(bytes(2 * BLOCK))  # the end of the archive, then padding to a whole record, as tarfile does
        if f.size % RECORD:
            f.write(bytes(RECORD - f.size % RECORD))
        f.close()
        shard = ShardFile(self._path, f.sha256.hexdigest(), f.size, len(self._rows),
                          np.asarray(self._rows, np.int64), f.chunk_digests())
        self._file = None
        return shard

