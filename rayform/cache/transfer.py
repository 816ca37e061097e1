"""A shard as a stream: its verified local copy, or fetched from the store while it is
written into the cache, hashed on the way and verified at the end.

A fetcher thread reads the shard ahead of the reader (network, hashing and the cache write
overlap decoding), with one streaming request where the store allows it (``objectread``).
A dropped connection, a stall or a busy server (503 Slow Down) mid-shard is tried again
after a jittered, growing wait and the read resumes at the byte where it stopped, for as
long as bytes keep coming (``retry.Retry``: a time budget, reset by progress); when it is
spent, one error names the shard, the store and how long it tried.

No byte reaches the reader before it is verified: the pack names the sha256 of every
chunk (1 MiB) of every shard, and the fetcher hands over a chunk only once its bytes
match, so a flipped bit stops the stream at its chunk, before anything reads it. At the shard's end
the whole is checked against its name before it is renamed into the cache. (A pack made
before chunk digests existed is fetched whole into the cache, verified, then read.)

Both ways a shard arrives (``CachedStore.fetch``: into the cache, in the calling thread;
``ShardStream``: handed over as it comes) are one :class:`Transfer`: the shard read chunk
by chunk into one reused buffer (a fresh megabyte per read cost page faults, a tenth of a
first epoch's CPU), each chunk verified and written into the cache once.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

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
READ_AHEAD = 16  # chunks fetched ahead of the reader: 16 MiB a stream, so I/O overlaps decoding
_JOIN_S = 10.0  # how long closing waits for the fetcher to notice (it drops its own partial copy)


class Transfer:
    """One blob read from its store into the cache, front to back: ``open_at(byte)`` opens a
    raw reader from a byte on; a read that fails or stalls is retried after ``retry``'s
    backoff and resumed at the byte where it stopped. With ``chunks`` (the pack's sha256 of
    every ``chunk_bytes`` of the blob) each chunk is verified before it is written or
    handed on; at the end the whole is checked against its name and put in place. On any
    failure or stop, nothing is kept."""

    def __init__(self, size: int, what: str, open_at: Callable[[int], objectread.SequentialRead],
                 arriving: CacheWriter, origin: str, retry: Retry, chunks: bytes | None = None, chunk_bytes: int = 0,
                 stop: threading.Event | None = None, lock: FetchLock | None = None):
        self.size, self.what, self.origin, self.retry = size, what, origin, retry
        self._lock = lock  # tells the machine's other processes how far the copy is verified
        self.chunks, self.chunk_bytes = chunks, chunk_bytes
        self._open_at, self._arriving = open_at, arriving
        self._stop = stop or threading.Event()
        self._attempts = retry.attempts(self._stop)
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


class ShardStream:
    """A read-only file object over one shard, read front to back; ``what`` names it in
    messages, digest included. Made by ``CachedStore.stream``.

    From the cache it is the local file. From the store, a fetcher thread runs its
    :class:`Transfer`, which tees it into the cache, and hands it over in verified chunks
    up to ``READ_AHEAD`` ahead of the reader, so network, hashing and cache writes overlap
    the reader's decoding. ``pos`` is where the reader is.
    """

    def __init__(self, digest: str, size: int, what: str, *, local: Path | None = None,
                 open_at: Callable[[int], objectread.SequentialRead] | None = None,
                 arriving: CacheWriter | None = None, origin: str = "", retry: Retry = Retry(),
                 chunks: bytes | None = None, chunk_bytes: int = 0):
        """From a verified ``local`` file; or fetched by ``open_at(byte)`` (a raw reader of the
        blob from that byte on) into ``arriving``, ``origin`` naming where it comes from."""
        self.digest, self.size, self.what = digest, size, what
        self.chunks = chunks
        self.pos = 0
        self.from_cache = local is not None
        self._verdict: IntegrityError | None = None
        self._file: BinaryIO | None = None
        self._fetcher: threading.Thread | None = None
        if local is not None:
            self._file = open(local, "rb")
            return
        assert open_at is not None and arriving is not None
        self._chunks: queue.Queue[object] = queue.Queue(maxsize=READ_AHEAD)
        self._stop = threading.Event()
        self._transfer = Transfer(size, what, open_at, arriving, origin, retry, chunks, chunk_bytes, self._stop)
        self._buf, self._off = b"", 0
        self._done = False
        self._fetcher = threading.Thread(target=self._fetch, name=f"rayform-fetch-{digest[:8]}", daemon=True)
        self._fetcher.start()

    @property
    def verified_chunks(self) -> bool:
        """True if every byte handed over is verified first (the pack names chunk digests)."""
        return self.from_cache or self.chunks is not None

    @property
    def fetched(self) -> int:
        """How far the fetcher got."""
        return self.size if self.from_cache else self._transfer.fetched

    # -- the fetcher (its own thread) ------------------------------------------------------
    def _fetch(self) -> None:
        """Run the transfer; the last item queued is None (whole and verified, now in the
        cache), a verdict on the whole, or the error that ended it."""
        last: _Verdict | BaseException | None = None
        try:
            self._transfer.run(self._put)
        except IntegrityError as e:
            last = _Verdict(e) if self._transfer.whole_mismatch else e  # a whole's mismatch: said at its end
        except BaseException as e:  # handed to the reader, never lost in this thread
            last = e
        finally:
            self._put(last)

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._chunks.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    # -- the reader ------------------------------------------------------------------------
    def read(self, n: int = -1) -> bytes:
        if self._file is not None:
            data = self._file.read(n)
            self.pos += len(data)
            return data
        parts = []
        while n != 0 and not self._done:
            if self._off == len(self._buf):
                item = self._chunks.get()
                if isinstance(item, bytes):
                    self._buf, self._off = item, 0
                    continue
                self._done = True
                if isinstance(item, _Verdict):
                    self._verdict = item.error  # every byte was handed over: raised by finish()
                elif isinstance(item, BaseException):
                    raise item
                break
            take = len(self._buf) - self._off if n < 0 else min(n, len(self._buf) - self._off)
            parts.append(self._buf if take == len(self._buf) else self._buf[self._off:self._off + take])
            self._off += take
            n -= take if n > 0 else 0
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self.pos += len(data)
        return data

    def finish(self) -> None:
        """Read what is left and verify it (from the store: it is then in the cache)."""
        while self.read(STREAM_CHUNK):
            pass
        self.close()
        if self._verdict is not None:
            raise self._verdict

    def abort(self) -> None:
        """Stop fetching; a partial or bad shard is never kept (the fetcher drops its copy)."""
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._fetcher is not None:
            self._stop.set()
            self._fetcher.join(_JOIN_S)
            self._fetcher = None


@dataclass(frozen=True)
class _Verdict:
    """The shard's bytes, all handed over, do not hash to its name (raised by ``finish``)."""

    error: IntegrityError


def _close_quietly(src: objectread.SequentialRead | None) -> None:
    if src is not None:
        try:
            src.close()
        except Exception:  # closing a broken connection: what failed is reported already
            pass
