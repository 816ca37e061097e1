"""Blobs that writers share: a writer that finds a blob already there (a dedupe hit) freshens
it, and a deleter deletes a blob only if nobody freshened it since it decided to, so neither a
failed writer taking back what it wrote nor ``gc`` ever deletes a blob another writer has just
come to reference (git freshens the objects it finds for the same reason).

Two deleters: a failed writer takes back the blobs it wrote new (``take back``: unless freshened
since its own write, as ``Mark`` records it); ``gc`` deletes unreachable blobs (unless freshened
since its grace period's cut-off).

- **Local stores** are race-free. Freshening sets the file's modification time past both now
  and what it was (the filesystem's clock is coarse: a bare ``utime`` could leave it equal). A
  deleter first renames the blob to a tombstone beside it (``.gone-<host>-<pid>-<digest>``),
  then reads the tombstone's time: freshened, it is renamed back; else it is deleted. A
  writer's freshening either lands before the rename (the deleter sees it) or fails on a
  missing file, and the writer then writes the blob itself. A tombstone whose deleter died is
  put back, never deleted (``sweep_tombstones``).
- **S3** (and every filesystem with settable metadata): freshening rewrites the object's
  metadata in place (a copy onto itself, ``rayform-touched: <random>``), which also renews its
  ``LastModified``. A take-back deletes only a blob with no such mark (its own write left none);
  ``gc`` asks for the object's time again right before deleting. An object store offers no
  rename, so between that last look and the delete lies one request's time: a dedupe landing in
  exactly that window is the one case not covered (the README states it; ``rayform verify``
  finds it).
- **Other filesystems** (``memory://``, GCS, Azure): freshening writes the bytes again, and the
  deleter compares the object's modification time with the one it saw.
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, NamedTuple

from rayform import names
from rayform.jobs import alive
from rayform.store.atomic import STALE_TEMP_SECONDS, host_name

TOUCHED = "rayform-touched"  # S3 user metadata a freshening leaves
TOMBSTONE = ".gone-"
_TOMBSTONE = re.compile(r"\.gone-([A-Za-z0-9\-]{1,32})-(\d{1,10})-([0-9a-f]{64})")
_METADATA = {"s3", "s3a"}


Mark = int | float | str | None


class NewBlob(NamedTuple):
    """A blob a writer wrote (``new``) or found and freshened, and what that left on it: a local
    file's modification time in ns; on S3 its ``rayform-touched`` token ("" for a write, which
    leaves none); elsewhere the object's modification time. A take-back deletes a blob this
    writer wrote new only while what is on it is one of its own marks: anything else means
    another writer freshened it since, and references it."""

    digest: str
    mark: Mark
    new: bool = True


def _tombstone(path: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, f"{TOMBSTONE}{host_name()}-{os.getpid()}-{name}")


class Freshness:
    """Freshening and careful deletion on one filesystem (``Store`` holds one)."""

    def __init__(self, fs: Any, protocol: str, is_local: bool):
        self.fs, self.protocol, self.is_local = fs, protocol, is_local

    # -- writers -----------------------------------------------------------------------
    def freshen(self, path: str, rewrite: Callable[[], object]) -> tuple[bool, Mark]:
        """Mark the blob at ``path`` as just referenced: ``(True, the mark it left)``, or
        ``(False, None)`` if it is not there (the caller writes it). ``rewrite`` writes its
        bytes again, where that is how a store freshens."""
        if self.is_local:
            try:
                before = os.stat(path).st_mtime_ns
                t = max(time.time_ns(), before + 1)
                os.utime(path, ns=(t, t))
                after = os.stat(path).st_mtime_ns
                if after == before:  # a file system keeping coarser times than asked
                    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))
                    after = os.stat(path).st_mtime_ns
                return True, after
            except FileNotFoundError:
                return False, None
        if self.protocol in _METADATA:
            token = secrets.token_hex(8)
            try:
                self.fs.setxattr(path, **{TOUCHED: token})
                return True, token
            except FileNotFoundError:
                return False, None
        rewrite()
        return True, self._modified(path)

    def confirm(self, path: str) -> bool:
        """Freshen the blob at ``path`` where that costs no rewrite (a local file's time, an S3
        object's metadata), so a gc deciding from now on keeps it: False if it is gone. Other
        stores only say whether it is there."""
        if self.is_local or self.protocol in _METADATA:
            return self.freshen(path, lambda: None)[0]
        return bool(self.fs.exists(path))

    def mark(self, path: str) -> Mark:
        """What a writer's own write of ``path`` left (``NewBlob.mark``)."""
        if self.is_local:
            return os.stat(path).st_mtime_ns
        if self.protocol in _METADATA:
            return ""
        return self._modified(path)

    # -- deleters ----------------------------------------------------------------------
    def take_back(self, path: str, marks: Collection[Mark]) -> bool:
        """Delete a blob this writer wrote new, unless what is on it is none of ``marks`` (this
        writer's own writes and freshenings): another writer freshened it since, and references
        it. True if deleted."""
        if self.is_local:
            return self._delete_local(path, lambda mtime_ns: mtime_ns not in marks)
        if self.protocol in _METADATA:
            metadata = self._metadata(path)
            if metadata is None:
                return False
            token = metadata.get(TOUCHED, metadata.get(TOUCHED.replace("-", "_"), ""))
            if token not in marks:
                return False
            return self._rm(path)
        modified = self._modified(path)
        if modified is None or modified not in marks:
            return False
        return self._rm(path)

    def take_back_all(self, path_of: Callable[[str], str], blobs: Iterable[NewBlob]) -> int:
        """``take_back`` each blob recorded new, against every mark the writer left on it (its
        own write, and its own freshenings of it from other processes). Returns how many went."""
        marks: dict[str, set[Mark]] = {}
        new: set[str] = set()
        for blob in blobs:
            marks.setdefault(blob.digest, set()).add(blob.mark)
            if blob.new:
                new.add(blob.digest)
        gone = 0
        for digest in sorted(new):
            if None not in marks[digest]:  # None: stopped between writing and knowing what it left; gc's to judge
                gone += self.take_back(path_of(digest), marks[digest])
        return gone

    def collect(self, path: str, cutoff: float) -> bool:
        """Delete an unreachable blob (``gc``) unless it was written or freshened after ``cutoff``
        (seconds since the epoch). True if deleted."""
        if self.is_local:
            return self._delete_local(path, lambda mtime_ns: mtime_ns / 1e9 >= cutoff)
        modified = self._modified(path)
        if modified is None or modified >= cutoff:
            return False
        return self._rm(path)

    def _delete_local(self, path: str, keep: Callable[[int], bool]) -> bool:
        tomb = _tombstone(path)
        try:
            os.rename(path, tomb)
            kept = keep(os.stat(tomb).st_mtime_ns)
        except FileNotFoundError:  # gone, or put back by a sweep that took this process for dead
            return False
        if kept:
            os.replace(tomb, path)  # the same bytes, whoever wrote them meanwhile
            return False
        os.unlink(tomb)
        return True

    def _rm(self, path: str) -> bool:
        try:
            self.fs.rm_file(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _info(self, path: str) -> dict[str, Any] | None:
        try:
            self.fs.invalidate_cache(path)
            info: dict[str, Any] = self.fs.info(path)
            return info
        except FileNotFoundError:
            return None

    def _metadata(self, path: str) -> dict[str, Any] | None:
        try:
            self.fs.invalidate_cache(path)
            metadata: dict[str, Any] = self.fs.metadata(path)
            return metadata
        except FileNotFoundError:
            return None

    def _modified(self, path: str) -> float | None:
        info = self._info(path)
        return None if info is None else modified_of(info)


def modified_of(info: dict[str, Any]) -> float | None:
    """When a listed file was written, from fsspec's details (local ``mtime``, S3 ``LastModified``)."""
    for field in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def sweep_tombstones(root: str | os.PathLike[str], older_than: float = STALE_TEMP_SECONDS) -> int:
    """Put back the blobs whose deleter died between moving them aside and deciding (it might
    have had to keep them): a tombstone of a dead process on this host, or one untouched for
    ``older_than`` seconds. Returns how many were put back."""
    now, n = time.time(), 0
    base = os.path.join(os.fspath(root), "blobs")
    for directory, _, found in os.walk(base, followlinks=False):
        for name in found:
            m = _TOMBSTONE.fullmatch(name)
            if m is None or not names.DIGEST.fullmatch(m.group(3)):
                continue
            tomb = os.path.join(directory, name)
            try:
                st = os.lstat(tomb)
            except FileNotFoundError:
                continue
            mine = m.group(1) == host_name() and int(m.group(2)) == os.getpid()
            dead = m.group(1) == host_name() and not mine and not alive(int(m.group(2)))
            # a rename sets the change time: how long ago the blob was moved aside
            if os.path.islink(tomb) or not (dead or (now - st.st_ctime > older_than and not mine)):
                continue
            try:
                os.replace(tomb, os.path.join(directory, m.group(3)))
                n += 1
            except FileNotFoundError:
                pass
    return n
