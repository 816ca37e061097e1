"""Where rendered runs wait for the shard writers: a local directory, or the store itself.

A run is written once, by the task that rendered it, as sections (one per shard it feeds),
and each section is read once, by the task that writes that shard. Two places, one interface:

- ``LocalScratch``: files in a directory of this machine, for the local process pool (its
  workers share the directory). Our own files, written and read here: not hashed again.
- ``StoreScratch``: blobs in the pack's store, for any other executor (a Dask or Ray cluster,
  whose workers may share nothing but the store). Each section's sha256 travels with its
  place, and a section's bytes are checked against it before they are parsed: the store is
  untrusted. The driver deletes the runs when the pack is done; ``rayform gc`` takes what a
  killed pack left (they are blobs no ref reaches).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from rayform import names
from rayform.cache.store_view import StoreRef
from rayform.errors import IntegrityError, Malformed, RayformError, ScratchError
from rayform.packer.tar_writer import Buffer
from rayform.store.atomic import scratch_dir

SCRATCH = os.path.join(tempfile.gettempdir(), "rayform-pack")  # local work files of packing


@dataclass(frozen=True)
class Section:
    """The part of a run that one shard takes: where it lies, and what it must hash to."""

    run: str  # the run's file name (local) or blob digest (store)
    offset: int
    size: int
    samples: int
    sha256: str  # "" where the scratch is not shared (``verifies`` false)


class Scratch(Protocol):
    @property
    def verifies(self) -> bool:
        """Whether sections are hashed when written and checked when read."""

    def write(self, sections: list[list[Buffer]]) -> tuple[str, list[int]]:
        """Store a run made of ``sections`` (each the buffers to write in turn); its name and
        each section's offset in it."""

    def read(self, section: Section) -> Buffer:
        """A section's bytes, checked where they came from a shared place."""

    def remove(self, run: str) -> None: ...


@contextlib.contextmanager
def writing(directory: str) -> Iterator[None]:
    """Inside: a failed write to local scratch (a full disk, say) is one ScratchError naming it."""
    try:
        yield
    except RayformError:
        raise
    except OSError as e:
        raise ScratchError(
            f"pack scratch in {directory}: cannot write ({e.strerror or e}). Packing needs room for "
            "about one more copy of the pack there while it runs: free some, or point TMPDIR at a larger disk"
        ) from None


def _nonce() -> bytes:
    # two packs of the same slice render the same runs: a nonce keeps their names apart, so
    # that one pack's clean-up never deletes the other's run
    return os.urandom(16)


def _offsets(sections: list[list[Buffer]], start: int) -> list[int]:
    out, at = [], start
    for buffers in sections:
        out.append(at)
        at += sum(map(len, buffers))
    return out


@dataclass(frozen=True)
class LocalScratch:
    directory: str
    verifies = False

    @classmethod
    def create(cls) -> LocalScratch:
        with writing(SCRATCH):
            return cls(scratch_dir(SCRATCH))

    def write(self, sections: list[list[Buffer]]) -> tuple[str, list[int]]:
        with writing(self.directory):
            fd, path = tempfile.mkstemp(dir=self.directory, prefix="run-", suffix=".bin")
            with os.fdopen(fd, "wb") as f:
                for buffers in sections:
                    f.writelines(buffers)
        return os.path.basename(path), _offsets(sections, 0)

    def read(self, section: Section) -> Buffer:
        # mapped, not read: the shard writer writes the members straight from the page cache
        with open(self._path(section.run), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if section.offset + section.size > size:
                raise Malformed(f"pack scratch {section.run}: {size} bytes, a section written at "
                                f"{section.offset}–{section.offset + section.size}")
            start = section.offset - section.offset % mmap.ALLOCATIONGRANULARITY
            mapped = mmap.mmap(f.fileno(), section.offset + section.size - start, access=mmap.ACCESS_READ,
                               offset=start)
        return memoryview(mapped)[section.offset - start:]

    def remove(self, run: str) -> None:
        try:
            os.unlink(self._path(run))
        except FileNotFoundError:
            pass

    def _path(self, run: str) -> str:
        if os.path.basename(run) != run or not run.startswith("run-"):
            raise Malformed(f"pack scratch: {run!r} is not a run's file name")
        return os.path.join(self.directory, run)


@dataclass(frozen=True)
class StoreScratch:
    store_ref: StoreRef
    verifies = True

    def write(self, sections: list[list[Buffer]]) -> tuple[str, list[int]]:
        nonce = _nonce()
        digest = hashlib.sha256(nonce)
        local = scratch_dir(SCRATCH)
        path = os.path.join(local, "run.bin")
        try:
            with writing(local), open(path, "wb") as f:
                f.write(nonce)
                for buffers in sections:
                    for b in buffers:
                        digest.update(b)
                        f.write(b)
            name = self.store_ref.open().put_blob_file(path, digest.hexdigest())
        finally:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            os.rmdir(local)
        return name, _offsets(sections, len(nonce))

    def read(self, section: Section) -> bytes:
        store = self.store_ref.open()
        data = store.read_range(names.digest(section.run), section.offset, section.size)
        if len(data) != section.size or hashlib.sha256(data).hexdigest() != section.sha256:
            raise IntegrityError(f"pack run {section.run[:16]} in {store.display}: the section at "
                                 f"{section.offset} is not the bytes written there; pack again")
        return data

    def remove(self, run: str) -> None:
        self.store_ref.open().delete_blob(run)
