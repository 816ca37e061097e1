"""A shard as a stream: its verified local copy, or fetched from the store while it is
written into the cache, hashed on the way and verified at the end.

A fetch reads the shard on a thread of its own (network, hashing and the cache write overlap
decoding), with one streaming request where the store allows it (``objectread``).
A dropped connection, a stall or a busy server (503 Slow Down) mid-shard is tried again
after a jittered, growing wait and the read resumes at the byte where it stopped, for as
long as bytes keep coming (``retry.Retry``: a time budget, reset by progress); when it is
spent, one error names the shard, the store and how long it tried.

No byte reaches the reader before it is verified: the pack names the sha256 of every
chunk (1 MiB) of every shard, and the fetcher hands over a chunk only once its bytes
match, so a flipped bit stops the stream at its chunk, before anything reads it. At the shard's end
the whole is checked against its name before it is renamed into the cache. (A pack made
before chunk digests existed is fetched whole into the cache, verified, then read.)

Every blob arrives as one :class:`Transfer` (``CachedStore.fetch`` for shards, whose samples
are read as the chunks arrive, ``arrival``; whole for manifests and indexes): read chunk by
chunk into one reused buffer (a fresh megabyte per read cost page faults, a tenth of a
first epoch's CPU), each chunk verified and written into the cache once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rayform.cache.arrival import Arrival
from rayform.cache.directory import CacheWriter, FetchLock
from rayform.errors import (
    BlobNotFound,
    IntegrityError,
    RayformError,
    StoreError,
)
from rayform.store import objectread
from rayform.store.retry import Retry

STREAM_CHUNK = 1 << 20  # bytes asked of the store per read (and handed over at a time without chunk digests)


@dataclass(frozen=True)
class FetchRequest:
    """A blob to bring into the cache: its name and size, what messages call it, the sha256 of
    every ``chunk_bytes`` of it (32 bytes each; None: verified whole only) and the retry policy."""

    digest: str
    size: int
    what: str
    chunks: bytes | None = field(default=None, repr=False)
    chunk_bytes: int = 0
    retry: Retry = Retry()


class Transfer:
    """One blob read from its store into the cache, front to back: ``open_at(byte)`` opens a
    raw reader from a byte on; a read that fails or stalls is retried after ``retry``'s
    backoff and resumed at the byte where it stopped. With ``chunks`` (the pack's sha256 of
    every ``chunk_bytes`` of the blob) each chunk is verified before it is written or
    handed on; at the end the whole is checked against its name and put in place. On any
    failure or stop, nothing is kept."""

    def __init__(self, request: FetchRequest, open_at: Callable[[int], objectread.SequentialRead],
                 arriving: CacheWriter, origin: str, stop: threading.Event | None = None, lock: FetchLock | None = None):
        self.size, self.what, self.origin, self.retry = request.size, request.what, origin, request.retry
        self._lock = lock  # tells the machine's other processes how far the copy is verified
        self.chunks, self.chunk_bytes = request.chunks, request.chunk_bytes
        self._open_at, self._arriving = open_at, arriving
        self._stop = stop or threading.Event()
        self._attempts = request.retry.attempts(self._stop)
        self._src: objectread.SequentialRead | None = None
        self.fetched = 0  # bytes read from the store
        self.verified = 0  # bytes verified and written into the cache
        self.whole_mismatch = False  # every chunk matched, the whole did not (raised at the end)

    def run(self, deliver: Callable[[bytes], None] | None = None, arrival: Arrival | None = None) -> bool:
        """Read the blob to its end, handing each verified piece to ``deliver`` (and telling
        ``arrival`` how far it is verified, where chunks are); True once it is whole, verified
        and in the cache, False if stopped first. Raises what ended it."""
        piece = self.chunk_bytes if self.chunks is not None else STREAM_CHUNK
        buffer = memoryview(bytearray(max(1, min(piece, self.size))))
        # readable as it arrives only with chunk digests: else nothing is verified before the whole
        early = self.chunks is not None
        lock, arrival = (self._lock, arrival) if early else (None, None)
        if early:
            self._arriving.reserve(self.size)
        if lock is not None:
            lock.announce(self._arriving.temporary)
        if arrival is not None:
            arrival.begin(self._arriving.fileno(), self.size)
        try:
            while self.verified < self.size:
                need = min(piece, self.size - self.verified)
                while self.fetched - self.verified < need:
                    got = self._read_into(buffer[self.fetched - self.verified : need])
                    if got < 0:
                        return False
                    self.fetched += got
                data = buffer[:need]
                if early:
                    self._check(data)
                self._arriving.write(data)
                self.verified += need
                if lock is not None:
                    lock.progress(self.verified)
                if arrival is not None:
                    arrival.advance(self.verified)
                if deliver is not None:
                    deliver(bytes(data))
            try:
                self._arriving.commit(f"{self.what} from {self.origin}")
            except IntegrityError:
                self.whole_mismatch = True
                raise
            return True
        finally:
            _close_quietly(self._src)
            self._src = None
            self._arriving.discard()

    def _check(self, chunk: memoryview) -> None:
        """The next chunk of the blob, against the pack's digest: an IntegrityError if it differs."""
        assert self.chunks is not None
        k = self.verified // self.chunk_bytes
        if hashlib.sha256(chunk).digest() != self.chunks[32 * k : 32 * k + 32]:
            raise IntegrityError(
                f"{self.what} from {self.origin}: chunk {k} (bytes "
                f"{self.verified}-{self.verified + len(chunk)}) does not match the pack's digest. The store's "
                "copy is corrupt; nothing from that chunk on was used, and nothing of it was cached"
            )

    def _read_into(self, view: memoryview) -> int:
        """Bytes read into ``view`` (at least one), a dropped or throttled read tried again and
        resumed where it stopped, within ``retry``'s budget since the last byte; -1 if stopped."""
        while not self._attempts.stopped:
            try:
                if self._src is None:
                    self._src = self._open_at(self.fetched)
                got = _read_some(self._src, view[:STREAM_CHUNK])
                if not got:
                    raise ConnectionError(f"the stream ended at byte {self.fetched} of {self.size}")
                self._attempts.progress()
                return got
            except RayformError:
                raise
            except FileNotFoundError as e:
                raise BlobNotFound(f"{self.what}: not in {self.origin}") from e
            except Exception as e:  # a connection dropped, a 503: resume at the byte where it stopped
                _close_quietly(self._src)
                self._src = None
                if not self._attempts.wait(e) and not self._attempts.stopped:
                    raise StoreError(
                        f"{self.what} from {self.origin}: reading failed at byte {self.fetched} of {self.size} "
                        f"after {self._attempts.spent()} ({type(e).__name__}: {str(e)[:200]})"
                    ) from e
        return -1


def _read_some(src: objectread.SequentialRead, view: memoryview) -> int:
    """Up to ``len(view)`` bytes of ``src`` into ``view``: straight in where it can (``readinto``)."""
    readinto = getattr(src, "readinto", None)
    if readinto is not None:
        return int(readinto(view))
    data = src.read(len(view))
    view[: len(data)] = data
    return len(data)


def _close_quietly(src: objectread.SequentialRead | None) -> None:
    if src is not None:
        try:
            src.close()
        except Exception:  # closing a broken connection: what failed is reported already
            pass
