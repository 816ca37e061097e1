"""Keeping the shard cache within a size: least-recently-used whole blobs are evicted, never
one that a process is reading.

A reader pins a cached blob by holding a shared ``flock`` on it for as long as it reads it
(``pin``); eviction takes an exclusive lock without waiting and skips every blob it cannot
lock, so a blob in use is never deleted, on this machine or on another sharing the cache
(Linux NFS clients carry ``flock`` as a POSIX lock to the server). A pin also stamps the
blob's access time, which orders eviction (least recently pinned first), whatever the
mount's ``atime`` policy; the modification time is kept, so ``verify_once`` stays valid.
Small blobs (manifests, chunk digests) go last.

A blob evicted between a reader's lookup and its pin is found missing and fetched again;
one deleted while a reader has it mapped stays readable to that reader. Under a limit, room
is made before a fetch writes into the cache, counting the copies other fetches are writing
(each made its full size first), and again when a reader lets a shard go (``shrink``): the
cache is then over its limit only by the blobs pinned at that moment (what readers read, and
what arrives for them), and back within it once they are let go.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rayform import names
from rayform.store.atomic import is_stale, is_temporary

SMALL = 64 << 10


@dataclass(frozen=True)
class Evicted:
    files: int = 0
    bytes: int = 0
    pinned: int = 0  # blobs skipped because a process was reading them


class Pin:
    """A shared lock on one cached blob, held while it is read: ``fd`` is open on it."""

    def __init__(self, path: Path):
        while True:
            fd = os.open(path, os.O_RDONLY)  # FileNotFoundError: evicted, the caller fetches it again
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)  # evicted while we waited for the lock, maybe replaced: look again
            if not path.exists():
                raise FileNotFoundError(path)
        self.fd: int | None = fd
        st = os.fstat(fd)
        try:
            os.utime(fd, ns=(time.time_ns(), st.st_mtime_ns))
        except OSError:  # a read-only cache: eviction order falls back to the last access
            pass

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the lock
            self.fd = None

    def __enter__(self) -> Pin:
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


def blobs(root: Path) -> list[tuple[Path, os.stat_result]]:
    """Every cached blob with its stat, least recently pinned first."""
    return _scan(root)[0]


def _scan(root: Path) -> tuple[list[tuple[Path, os.stat_result]], int]:
    """The cached blobs (least recently pinned first) and the bytes of the copies arriving now
    (temporaries: a fetch makes its copy its full size first, so this counts what they will be)."""
    found = []
    arriving = 0
    base = root / "blobs"
    if not base.is_dir():
        return [], 0
    for sub in os.scandir(base):
        if not sub.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(sub.path):
            try:
                if names.DIGEST.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    found.append((Path(entry.path), entry.stat(follow_symlinks=False)))
                elif is_temporary(entry.name) and entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    if not is_stale(entry.name, st.st_mtime):  # a live fetch's, not a killed one's
                        arriving += st.st_size
            except FileNotFoundError:
                continue
    found.sort(key=lambda item: (item[1].st_atime_ns, item[0].name))
    return found, arriving


def evict(path: Path) -> int | None:
    """Delete one blob unless a process holds it: its size, or None where it is pinned."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        st = os.fstat(fd)
        try:
            if os.stat(path).st_ino != st.st_ino:
                return 0  # replaced by a fresh copy since: that one may be in use
            os.unlink(path)
        except FileNotFoundError:
            return 0
        return st.st_size
    finally:
        os.close(fd)


def shrink(root: Path, to: int, incoming: int = 0) -> Evicted:
    """Evict least-recently-used unpinned blobs until they, the copies arriving now and
    ``incoming`` bytes fit in ``to``. Blobs under ``SMALL`` bytes (manifests, chunk digests,
    small indexes) go only after every larger one: they free little, and they are what says
    what the cache holds."""
    found, arriving = _scan(root)
    size = sum(st.st_size for _, st in found) + arriving
    found = [b for b in found if b[1].st_size >= SMALL] + [b for b in found if b[1].st_size < SMALL]
    files = freed = pinned = 0
    for path, st in found:
        if size + incoming <= to:
            break
        got = evict(path)
        if got is None:
            pinned += 1
            continue
        size -= st.st_size
        files, freed = files + (got > 0), freed + got
    return Evicted(files, freed, pinned)


def remove(paths: Iterable[Path]) -> Evicted:
    """Evict these blobs, skipping those in use."""
    files = freed = pinned = 0
    for path in paths:
        got = evict(path)
        if got is None:
            pinned += 1
        elif got:
            files, freed = files + 1, freed + got
    return Evicted(files, freed, pinned)
