"""The primitives of content-addressed storage: the hash of content and the one byte form of a
document, and local files that many processes share (hashing, verify-once, atomic writes,
sweeping what a killed process left behind).

Every file is written under a temporary name beside its target and renamed into place, so
a reader sees a whole file or none (on one machine or many, over NFS or Lustre). A
temporary is named ``.tmp-<host>-<pid>-<random>``: a later run on the same host deletes
those whose process is gone at once, and anyone deletes those untouched for an hour.
Nothing else is ever swept: only names of exactly that form, only regular files, never
through a symlink.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from rayform.jobs import alive

CHUNK = 4 << 20
STALE_TEMP_SECONDS = 3600
TEMP_PREFIX = ".tmp-"
_TEMP = re.compile(r"\.tmp-([A-Za-z0-9\-]{1,32})-(\d{1,10})-[A-Za-z0-9_]{4,16}")

# (path) -> the stat stamp of files this process has hashed (or found remembered) good.
_VERIFIED: dict[str, tuple[int, ...]] = {}
VERIFIED_DIR = "verified"  # in the cache directory: files hashed good once, for every process


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a manifest, so equal content gives an equal hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9\-]", "-", socket.gethostname())[:32] or "host"


def temp_prefix() -> str:
    """The prefix of this process's temporaries: ``.tmp-<host>-<pid>-``."""
    return f"{TEMP_PREFIX}{_host()}-{os.getpid()}-"


def stamp_of(path: Path, ctime: bool = True) -> tuple[int, ...]:
    """What identifies this version of a file: device, inode, size, modification time and,
    with ``ctime``, its change time, which no user can set (``utime`` can put an mtime back
    after an edit; the ctime still moves)."""
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) + ((st.st_ctime_ns,) if ctime else ())


def hash_file(path: str | os.PathLike[str]) -> str:
    # read into one reused buffer, not mapped whole: a mapped 64 MB shard would count in the
    # process's RSS while it is hashed, and a worker's first batch hashes dozens of them
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def verify_once(path: Path, digest: str, ctime: bool = True) -> bool:
    """True if ``path`` hashes to ``digest``: hashed once per file version for every process
    of this user (remembered in the cache directory), not once per process. A version is
    its ``stamp_of``; ``ctime=False`` for the cache's own files, whose change time moves
    whenever a reader pins them (the cache is written only by rayform, after verifying)."""
    try:
        stamp = stamp_of(path, ctime)
    except (FileNotFoundError, NotADirectoryError):
        return False
    if known_good(path, digest, stamp):
        return True
    if hash_file(path) != digest:
        return False
    mark_good(path, digest, stamp)
    return True


REMEMBERED_BYTES = 1 << 20  # a blob smaller than this is hashed on every read


def read_known_good(path: Path, digest: str) -> bytes | None:
    """The bytes of ``path`` if they hash to ``digest``, hashed once per file version (as
    :func:`verify_once`); None if they do not, or the file changed while read, or is absent."""
    try:
        stamp = stamp_of(path)
        data = path.read_bytes()
        if stamp_of(path) != stamp:
            return None
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    small = len(data) < REMEMBERED_BYTES  # hashed faster than a marker file is read
    if not small and known_good(path, digest, stamp):
        return data
    if sha256_hex(data) != digest:
        return None
    if not small:
        mark_good(path, digest, stamp)
    return data


def known_good(path: Path, digest: str, stamp: tuple[int, ...]) -> bool:
    """Whether this version (``stamp``) of ``path`` was hashed good, here or by another process."""
    key = str(path)
    if _VERIFIED.get(key) == stamp or _remembered(key, digest) == stamp:
        _VERIFIED[key] = stamp
        return True
    return False


def mark_good(path: Path, digest: str, stamp: tuple[int, ...]) -> None:
    """Record that this version of ``path`` hashes to ``digest`` (for every process)."""
    _VERIFIED[str(path)] = stamp
    _remember(str(path), digest, stamp)


def mark_verified(path: Path, digest: str) -> None:
    """Count a cache file verified (its bytes were hashed on arrival)."""
    mark_good(path, digest, stamp_of(path, ctime=False))


def _marker(key: str) -> Path:
    from rayform import config  # the cache directory, read when used (tests move it)

    return config.cache_dir() / VERIFIED_DIR / hashlib.sha256(key.encode()).hexdigest()[:32]


def _remembered(key: str, digest: str) -> tuple[int, ...] | None:
    try:
        text = _marker(key).read_text().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(text) < 6 or text[0] != digest or text[1] != key.replace(" ", "%20"):
        return None
    try:
        return tuple(int(v) for v in text[2:])
    except ValueError:
        return None


def _remember(key: str, digest: str, stamp: tuple[int, ...]) -> None:
    try:
        write_atomic(_marker(key), f"{digest} {key.replace(' ', '%20')} {' '.join(map(str, stamp))}\n".encode())
    except OSError:
        pass  # a read-only cache directory: every process hashes for itself, as it would anyway


def unlink_if_present(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def open_temporary(directory: str | os.PathLike[str]) -> tuple[int, str]:
    """``(fd, path)`` of a new temporary file in ``directory`` (made if absent)."""
    os.makedirs(directory, exist_ok=True)
    return tempfile.mkstemp(dir=directory, prefix=temp_prefix())


def publish(tmp: str, path: str | os.PathLike[str]) -> None:
    """Rename a finished temporary into place, readable by every user of a shared store."""
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared store from other users
    os.replace(tmp, path)


def write_atomic(path: str | os.PathLike[str], data: bytes | memoryview) -> None:
    fd, tmp = open_temporary(os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        publish(tmp, path)
    except BaseException:
        unlink_if_present(tmp)
        raise


def copy_atomic(src: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    fd, tmp = open_temporary(os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fo, open(src, "rb") as fi:
            while chunk := fi.read(CHUNK):
                fo.write(chunk)
        publish(tmp, path)
    except BaseException:
        unlink_if_present(tmp)
        raise


def move_atomic(src: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """``src`` renamed into place where it is on the same file system, else copied."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        publish(os.fspath(src), path)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        copy_atomic(src, path)


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
    return m.group(1) == _host() and int(m.group(2)) != os.getpid() and not alive(int(m.group(2)))


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
        if entry.is_dir(follow_symlinks=False) and is_stale(entry.name, entry.stat(follow_symlinks=False).st_mtime,
                                                             older_than=older_than):
            shutil.rmtree(entry.path, ignore_errors=True)
            n += 1
    return n
