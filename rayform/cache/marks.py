"""Verify once: a local file hashed good is remembered by its version, for every process.

A version of a file is its ``stamp_of``: device, inode, size, modification time and, where
asked, change time (which no user can set back). A file hashed good is remembered in this
process and as a marker in the cache directory (``verified/``), so a new DataLoader worker
does not hash the shards again; an edited file has another version, and is hashed again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rayform.store.atomic import write_atomic
from rayform.store.content import hash_file, sha256_hex

# (path) -> the stat stamp of files this process has hashed (or found remembered) good.
_VERIFIED: dict[str, tuple[int, ...]] = {}
VERIFIED_DIR = "verified"  # in the cache directory: files hashed good once, for every process


def stamp_of(path: Path, ctime: bool = True) -> tuple[int, ...]:
    """What identifies this version of a file: device, inode, size, modification time and,
    with ``ctime``, its change time, which no user can set (``utime`` can put an mtime back
    after an edit; the ctime still moves)."""
    st = path.stat()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) + ((st.st_ctime_ns,) if ctime else ())


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
