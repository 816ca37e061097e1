"""Writing shards: samples into byte-identical WebDataset tar files, with offset indexes.

Tars are written by webdataset's own ``TarWriter`` with everything that could vary pinned
(mtime 0, empty user and group, mode 0444, USTAR headers), so the same samples always give
the same bytes and hence the same shard name. While writing, we note where each member's
data starts, so a reader can take a sample out of a shard by offset, with no tar parsing.
"""

from __future__ import annotations

import builtins
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform.errors import InvalidInput

BLOCK = 512
NAME_MAX = 99  # USTAR keeps a name in one 100-byte field
CHUNK_BYTES = 1 << 20  # a streamed shard is verified chunk by chunk, each of this size (the last shorter)


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


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

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        view = memoryview(data)
        while view:
            take = min(len(view), self.chunk_bytes - self._chunk_fill)
            self._chunk.update(view[:take])
            self._chunk_fill += take
            view = view[take:]
            if self._chunk_fill == self.chunk_bytes:
                self._chunks.append(self._chunk.digest())
                self._chunk, self._chunk_fill = hashlib.sha256(), 0
        return self._f.write(data)

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
    index: np.ndarray  # (samples, 2 + 2*members): sample start, end, then (offset, size) per member
    chunks: builtins.bytes  # sha256 of each chunk of the shard, 32 bytes each


class ShardWriter:
    """Rolls samples into shards of about ``target_bytes``; yields each shard as it closes."""

    def __init__(self, directory: str, target_bytes: int, members: list[str], chunk_bytes: int | None = None):
        self.directory = directory
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.target_bytes = target_bytes
        self.members = sorted(members)  # TarWriter writes a sample's members in sorted order
        self._n = 0
        self._tar: Any = None  # webdataset's TarWriter of the open shard
        self._file: _HashingFile | None = None
        self._rows: list[list[int]] = []

    def add(self, key: str, sample: dict[str, bytes]) -> Iterator[ShardFile]:
        if sorted(sample) != self.members:
            raise InvalidInput(f"sample {key}: members {sorted(sample)} differ from {self.members}")
        if self._tar is None:
            self._open()
        start = self._tar.tarstream.offset
        row = [start, 0]
        pos = start
        for m in self.members:
            name = f"{key}.{m}"
            if len(name) > NAME_MAX:
                raise InvalidInput(f"tar member {name!r}: longer than {NAME_MAX} characters; shorten the stream name")
            size = len(sample[m])
            row += [pos + BLOCK, size]
            pos += BLOCK + _padded(size)
        self._tar.write({"__key__": key, **sample})
        row[1] = self._tar.tarstream.offset
        if row[1] != pos:  # a header that was not one block would break every offset
            raise AssertionError(f"tar layout of {key}: expected end {pos}, got {row[1]}")
        self._rows.append(row)
        if row[1] >= self.target_bytes:
            yield self._close()

    def finish(self) -> Iterator[ShardFile]:
        if self._tar is not None:
            yield self._close()

    def _open(self) -> None:
        path = os.path.join(self.directory, f"shard-{self._n:06d}.tar")
        self._n += 1
        # webdataset imports torch when torch is installed: import it when a shard is
        # written, so that `import rayform` stays light.
        import webdataset as wds

        self._file = _HashingFile(path, self.chunk_bytes)
        self._tar = wds.TarWriter(
            self._file, user="", group="", mode=0o444, encoder=False, mtime=0, format="USTAR_FORMAT"
        )
        self._path = path
        self._rows = []

    def _close(self) -> ShardFile:
        self._tar.close()
        f = self._file
        assert f is not None
        f.close()
        shard = ShardFile(self._path, f.sha256.hexdigest(), f.size, len(self._rows),
                          np.asarray(self._rows, np.int64), f.chunk_digests())
        self._tar = self._file = None
        return shard

