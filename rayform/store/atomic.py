"""Local files that many processes share: atomic writes, and sweeping what a killed process
left behind.

Every file is written under a temporary name beside its target and renamed into place, so
a reader sees a whole file or none (on one machine or many, over NFS or Lustre). A
temporary is named ``.tmp-<host>-<pid>-<random>``: a later run on the same host deletes
those whose process is gone at once, and anyone deletes those untouched for an hour.
Nothing else is ever swept: only names of exactly that form, only regular files, never
through a symlink.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

from rayform.jobs import alive
from rayform.store.content import CHUNK

STALE_TEMP_SECONDS = 3600
OnMark = Callable[[int], None]
TEMP_PREFIX = ".tmp-"
_TEMP = re.compile(r"\.tmp-([A-Za-z0-9\-]{1,32})-(\d{1,10})-[A-Za-z0-9_]{4,16}")


def host_name() -> str:
    """This host's name as temporaries carry it."""
    return re.sub(r"[^A-Za-z0-9\-]", "-", socket.gethostname())[:32] or "host"


def temp_prefix() -> str:
    """The prefix of this process's temporaries: ``.tmp-<host>-<pid>-``."""
    return f"{TEMP_PREFIX}{host_name()}-{os.getpid()}-"


def unlink_if_present(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def open_temporary(directory: str | os.PathLike[str]) -> tuple[int, str]:
    """``(fd, path)`` of a new temporary file in ``directory`` (made if absent, and made again
    where another process removed it as empty meanwhile: ``Store.remove_empty_folders``)."""
    for attempt in range(8):
        os.makedirs(directory, exist_ok=True)
        try:
            return tempfile.mkstemp(dir=directory, prefix=temp_prefix())
        except FileNotFoundError:
            if attempt == 7:
                raise
    raise AssertionError("unreachable")


def publish(tmp: str, path: str | os.PathLike[str], on_mark: OnMark | None = None) -> int:
    """Rename a finished temporary into place, readable by every user of a shared store, timed
    now (a file moved in keeps no older time: its age counts from here). Returns its modification
    time in ns as the file system keeps it: what this write left, which ``store.freshness``
    compares to tell whether another writer touched it since; ``on_mark`` hears it before the
    rename, so that no instant has the file in place and its writer not knowing it."""
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared store from other users
    now = time.time_ns()
    os.utime(tmp, ns=(now, now))
    mark = os.stat(tmp).st_mtime_ns
    if on_mark is not None:
        on_mark(mark)
    os.replace(tmp, path)
    return mark


@contextlib.contextmanager
def publishing(path: str | os.PathLike[str], on_mark: OnMark | None = None) -> Iterator[BinaryIO]:
    """A temporary file beside ``path``, renamed into place once what is written into it is
    whole (deleted if the writing fails); ``on_mark`` as for ``publish``."""
    fd, tmp = open_temporary(os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        publish(tmp, path, on_mark)
    except BaseException:
        unlink_if_present(tmp)
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | memoryview, on_mark: OnMark | None = None) -> None:
    with publishing(path, on_mark) as f:
        f.write(data)


def copy_atomic(src: str | os.PathLike[str], path: str | os.PathLike[str], on_mark: OnMark | None = None) -> None:
    with publishing(path, on_mark) as fo, open(src, "rb") as fi:
        while chunk := fi.read(CHUNK):
            fo.write(chunk)


def move_atomic(src: str | os.PathLike[str], path: str | os.PathLike[str], on_mark: OnMark | None = None) -> None:
    """``src`` renamed into place where it is on the same file system, else copied."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        publish(os.fspath(src), path, on_mark)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        copy_atomic(src, path, on_mark)


def is_temporary(name: str) -> bool:
    """True for a file name of one of our temporaries (``temp_prefix``)."""
    return _TEMP.fullmatch(name) is not None


def is_stale(name: str, mtime: float, now: float | None = None, older_than: float = STALE_TEMP_SECONDS) -> bool:
    """True for a temporary of ours (by its name) whose writer is gone: on this host, a dead
    pid; anywhere, untouched for ``older_than`` seconds."""
    m = _TEMP.fullmatch(name)
    if m is None:
        return False
    if (now if now is not None else time.time()) - mtime > older_than:
        return True
    return m.group(1) == host_name() and int(m.group(2)) != os.getpid() and not alive(int(m.group(2)))


def sweep_temporaries(root: str | os.PathLike[str], older_than: float = STALE_TEMP_SECONDS) -> int:
    """Delete stale temporaries below ``root`` (see :func:`is_stale`); returns how many."""
    now, n = time.time(), 0
    for directory, dirs, names in os.walk(os.fspath(root), followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(TEMP_PREFIX)]
        for name in names:
            if not name.startswith(TEMP_PREFIX):
                continue
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                if not os.path.islink(path) and is_stale(name, st.st_mtime, now, older_than):
                    os.unlink(path)
                    n += 1
            except FileNotFoundError:
                pass
    return n


def scratch_dir(parent: str | os.PathLike[str]) -> str:
    """A new private directory for one process's work files, swept by :func:`sweep_scratch`
    once that process is gone."""
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(dir=parent, prefix=temp_prefix())


def sweep_scratch(parent: str | os.PathLike[str], older_than: float = STALE_TEMP_SECONDS) -> int:
    """Delete the stale scratch directories in ``parent`` (see :func:`is_stale`); returns how many."""
    n = 0
    try:
        entries = list(os.scandir(os.fspath(parent)))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:  # another process may remove its own directory between the listing and this look
            stale = entry.is_dir(follow_symlinks=False) and is_stale(
                entry.name, entry.stat(follow_symlinks=False).st_mtime, older_than=older_than)
        except FileNotFoundError:
            continue
        if stale:
            shutil.rmtree(entry.path, ignore_errors=True)
            n += 1
    return n


def remove_empty_dirs(parent: str | os.PathLike[str]) -> None:
    """Remove the empty directories directly in ``parent``. One a writer is filling at that
    moment stays (``rmdir`` refuses it), or is made again by the writer (``open_temporary``)."""
    try:
        entries = list(os.scandir(os.fspath(parent)))
    except OSError:  # none, or no directory at all
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            try:
                os.rmdir(entry.path)
            except OSError:
                pass  # not empty, or gone
