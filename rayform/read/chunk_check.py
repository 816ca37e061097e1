"""Verifying a mapped shard chunk by chunk, as a random reader reads samples from it."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from rayform.cache import marks
from rayform.errors import IntegrityError, Malformed


class ChunkCheck:
    """A mapped shard whose bytes are verified chunk by chunk (against the pack's chunk
    digests) as samples are read from it; once every chunk has been, the file is remembered
    as verified whole, for every process (``marks.mark_good``).

    A chunk is hashed from a read into one reused buffer, not through the map: a sample
    needs a few KiB of its chunk's MiB, and the rest would stay in the process's resident
    set until the next page drop (64 MiB a batch of 64 where every sample is in a new chunk)."""

    def __init__(self, path: Path, digest: str, stamp: tuple[int, ...], digests: bytes, chunk_bytes: int, size: int,
                 what: str):
        self.path, self.digest, self.stamp, self.digests = path, digest, stamp, digests
        self.chunk_bytes, self.size, self.what = chunk_bytes, size, what
        self.done = bytearray(len(digests) // 32)
        self.left = len(self.done)
        if self.left != -(-size // chunk_bytes):
            raise Malformed(f"{what}: {self.left} chunk digests for {size} bytes in chunks of {chunk_bytes}")

    def read(self, start: int, end: int) -> bool:
        """Verify the chunks holding bytes ``start:end`` (each once); True once all are."""
        cb = self.chunk_bytes
        for k in range(start // cb, max(start, end - 1) // cb + 1):
            if self.done[k]:
                continue
            buffer = _chunk_buffer(cb)
            with open(self.path, "rb", buffering=0) as f:
                n = os.preadv(f.fileno(), [buffer[: min(cb, self.size - k * cb)]], k * cb)
            if hashlib.sha256(buffer[:n]).digest() != self.digests[32 * k : 32 * k + 32]:
                raise IntegrityError(f"{self.what}: chunk {k} does not match its digest. The stored copy is corrupt; "
                                     "re-create it from its source")
            self.done[k] = 1
            self.left -= 1
        if self.left:
            return False
        if marks.stamp_of(self.path) == self.stamp:  # unchanged while it was read: it is whole and good
            marks.mark_good(self.path, self.digest, self.stamp)
        return True


_BUFFERS = threading.local()


def _chunk_buffer(size: int) -> memoryview:
    """This thread's one buffer that chunks are read into to be hashed."""
    buffer: memoryview | None = getattr(_BUFFERS, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _BUFFERS.buffer = memoryview(bytearray(size))
    return buffer
