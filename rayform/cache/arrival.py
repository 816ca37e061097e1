"""A shard read while it arrives in the cache: by this process's fetch, or by another
process's on the same machine, only ever up to the bytes verified so far.

A fetch with chunk digests (``fetch.Transfer``) makes the shard's copy its full size first,
then writes it front to back, a chunk at a time, each verified before it is written; it
tells this process's readers how far it got (``advance``) and the machine's other processes
through its fetch lock (``cache.directory.FetchLock``: the copy's name and how far it is verified). A
reader maps the copy and waits, per sample, until the chunks the sample spans are there.
"""

from __future__ import annotations

import os
import threading

from rayform.cache.directory import ArrivingCopy
from rayform.errors import StoreError


class Arrival:
    """A shard on its way into the cache, as a reader sees it: its copy (``fd``, written front
    to back, made its full size first) and how many of its bytes are verified against the
    pack's chunk digests, so samples are read by offset while the rest arrives. The copy is
    this process's own fetch's (``begin``, told each chunk by ``advance``) or another
    process's on this machine (``begin_elsewhere``: how far it is verified is read from that
    fetch's lock). Made by the reader, passed to ``CachedStore.fetch``; only a fetch with
    chunk digests begins one (a cached shard, or one of an older pack, just ends)."""

    POLL_S = 0.002  # how often a reader of another process's copy looks how far it got

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.fd: int | None = None  # the copy, once begun (a descriptor of our own)
        self.verified = 0
        self.size = 0
        self.ended = False
        self.error: BaseException | None = None
        self.elsewhere: ArrivingCopy | None = None
        self._released = False  # the reader is done with it

    def begin(self, fd: int, size: int) -> None:
        with self._changed:
            if self.fd is None and not self.ended:
                self.fd, self.size = os.dup(fd), size
            self._changed.notify_all()

    def begin_elsewhere(self, copy: ArrivingCopy, size: int) -> None:
        with self._changed:
            if self.fd is not None or self.ended:
                copy.close()
                return
            self.elsewhere, self.fd, self.size = copy, copy.fd, size
            self._changed.notify_all()

    def advance(self, verified: int) -> None:
        with self._changed:
            self.verified = verified
            self._changed.notify_all()

    def end(self, error: BaseException | None = None) -> None:
        with self._changed:
            if not self.ended:
                self.ended, self.error = True, error
                if self.elsewhere is not None:
                    self.elsewhere.freeze()  # before this process may fetch it itself, through the same lock file
            self._changed.notify_all()
            if self._released:
                self._close()

    def reached(self, at_least: int | None = None) -> int:
        """Bytes of the copy verified so far (another process's lock is read again only if fewer
        than ``at_least`` are known: a reader asks for every sample)."""
        with self._changed:
            if self.elsewhere is None:
                return self.verified
            return min(self.elsewhere.verified(at_least), self.size)  # another process's word: never past the end

    def wait_begun(self) -> bool:
        """Wait until the copy can be read as it arrives (True) or the fetch has ended (False)."""
        with self._changed:
            self._changed.wait_for(lambda: self.fd is not None or self.ended)
            return self.fd is not None and not (self.ended and self.error is not None)

    def wait_for(self, end: int) -> None:
        """Wait until bytes ``[0, end)`` are verified; raise what ended the fetch short of them."""
        with self._changed:
            while self.reached(end) < end:
                if self.ended:
                    if self.reached(end) >= end:
                        return
                    raise self.error if self.error is not None else StoreError(
                        f"the shard's copy ended at byte {self.reached()}; a sample needs {end}")
                self._changed.wait(None if self.elsewhere is None else self.POLL_S)

    @property
    def whole(self) -> bool:
        """Every byte arrived and verified, and the shard is in the cache."""
        return self.ended and self.error is None and self.reached() >= self.size

    def close(self) -> None:
        """The reader is done with it: its descriptors are closed once the fetch has ended too
        (the fetch still reads how far another process's copy got)."""
        with self._changed:
            self._released = True
            if self.ended:
                self._close()

    def _close(self) -> None:
        if self.elsewhere is not None:
            self.elsewhere.close()
        elif self.fd is not None:
            os.close(self.fd)
        self.fd, self.elsewhere = None, None
