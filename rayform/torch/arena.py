"""Shared-memory slots for the images of batches made in DataLoader workers, recycled as
soon as the training loop lets go of a batch, and never before.

Why: a batch's images are ~19 MB (64 samples × two 224×224 cameras); fresh shared memory
for each costs a page fault per 4 KiB in the worker that fills it and again in the process
that reads it (about as much as decoding into it, on this kind of machine), plus a file
descriptor sent and mapped per tensor. A worker instead keeps one file of slots (``RAYFORM_BATCH_SLOTS``, 6)
mapped, fills a free slot and sends only its number; the main process maps the file once
and wraps the slot in tensors without a copy.

When a slot is free again: the main process makes a slot's tensors from one numpy array
(a :class:`_Lease`) that torch keeps alive for as long as any tensor or view of that memory
lives (``torch.from_numpy`` holds the array until the storage dies); a finalizer on that
array marks the slot free in the file's header, which the worker reads. So a batch, or any
view of its images, held by the training loop keeps its slot out of use; a worker that
finds no free slot allocates fresh memory, as without slots (it never waits, nor
overwrites). State per slot, one byte: 0 free, 1 filled by the worker (in flight or held
by the consumer); only the worker sets 1, only the consumer sets 0.

The file lives in ``/dev/shm`` and is unlinked as soon as the main process has mapped it
(both keep their mappings), so nothing is left behind however the processes end; a file
whose worker died before that is swept by the next worker that starts.
"""

from __future__ import annotations

import functools
import mmap
import os
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from rayform import config
from rayform.jobs import alive

HEADER = 4096
PREFIX = "rayform-batches-"


class _Lease(np.ndarray):
    """A slot's bytes as one process uses them; weakly referenceable, so its death is seen."""


class Taken:
    """A slot a worker has taken. Given back when the worker's last tensor using it is gone,
    unless the batch in it was shipped (pickled to the consumer, who gives it back)."""

    def __init__(self, arena: Arena, slot: int):
        self.arena = arena
        self.slot = slot
        self.shipped = False

    def _gone(self) -> None:
        if not self.shipped:
            self.arena.state[self.slot] = 0


class Arena:
    """A worker's slots (the worker's side: it makes the file and fills the slots)."""

    def __init__(self, slot_bytes: int, slots: int):
        self.slot_bytes = (slot_bytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        self.slots = slots
        _sweep()
        fd, path = tempfile.mkstemp(prefix=f"{PREFIX}{os.getpid()}-", dir=_directory())
        try:
            size = HEADER + self.slots * self.slot_bytes
            if hasattr(os, "posix_fallocate"):  # Linux: a full /dev/shm fails here, not as a SIGBUS later
                os.posix_fallocate(fd, 0, size)
            else:  # macOS has no posix_fallocate (nor /dev/shm: the file is in the temporary directory)
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        except OSError:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        self.path = path
        self.state = np.frombuffer(self.map, np.uint8, self.slots)

    def take(self, nbytes: int) -> tuple[Taken, torch.Tensor] | None:
        """A free slot of at least ``nbytes`` and its memory as a uint8 tensor; None if none is free."""
        if nbytes > self.slot_bytes:
            return None
        free = np.flatnonzero(self.state == 0)
        if not len(free):
            return None
        taken = Taken(self, int(free[0]))
        self.state[taken.slot] = 1
        return taken, _slot_tensor(self.map, self.slot_bytes, taken.slot, taken._gone)


_arena: tuple[int, Arena | None] | None = None  # (pid, this process's arena or None if it could not be made)


def worker_arena(nbytes: int) -> Arena | None:
    """This worker process's arena, made on first use with slots of ``nbytes`` (None where
    shared memory cannot hold one: batches then get fresh memory, as before)."""
    global _arena
    if _arena is None or _arena[0] != os.getpid():
        slots = config.batch_slots()  # read when a worker first makes a batch (a bad value: one error)
        if slots <= 0:
            return None
        try:
            _arena = (os.getpid(), Arena(nbytes, slots))
        except OSError:
            _arena = (os.getpid(), None)
    return _arena[1]


class _Opened:
    """A worker's arena as the consuming process maps it."""

    def __init__(self, path: str, size: int, slots: int):
        worker = _worker_of(Path(path))
        if worker is None:
            raise RuntimeError(f"{path}: not a batch arena's name")
        fd = os.open(path, os.O_RDWR)
        try:
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        os.unlink(path)  # mapped on both sides now: nothing needs the name any more
        self.state = np.frombuffer(self.map, np.uint8, slots)
        self.worker = worker
        self.leases = 0


_opened: dict[str, _Opened] = {}


def lease(path: str, slot_bytes: int, slots: int, slot: int) -> torch.Tensor:
    """Slot ``slot`` of the arena at ``path`` as a uint8 tensor, the slot freed when the last
    tensor using its memory is gone (in the consuming process)."""
    if _worker_of(Path(path)) == os.getpid():
        raise RuntimeError("a batch in a worker's slot was unpickled in that worker; ship it to another process")
    opened = _opened.get(path)
    if opened is None:
        _forget_finished()
        opened = _opened[path] = _Opened(path, HEADER + slots * slot_bytes, slots)
    if not 0 <= slot < slots or opened.state[slot] != 1:
        raise RuntimeError(f"batch slot {slot} of {path} is not one a worker filled")
    opened.leases += 1
    return _slot_tensor(opened.map, slot_bytes, slot, functools.partial(_release, opened, slot))


def _slot_tensor(arena: mmap.mmap, slot_bytes: int, slot: int, gone: Callable[[], None]) -> torch.Tensor:
    """A slot's bytes as a uint8 tensor over one :class:`_Lease` array, which torch keeps alive
    as long as any tensor or view of that memory lives: ``gone`` runs when the last one dies."""
    array = np.ndarray.__new__(_Lease, (slot_bytes,), np.uint8, arena, HEADER + slot * slot_bytes)
    weakref.finalize(array, gone)
    return torch.from_numpy(array)


def _release(opened: _Opened, slot: int) -> None:
    opened.state[slot] = 0
    opened.leases -= 1


def _forget_finished() -> None:
    """Drop the arenas of workers that have exited (the mapping goes with its last lease)."""
    for path, opened in list(_opened.items()):
        if opened.leases == 0 and not alive(opened.worker):
            del _opened[path]


def _worker_of(path: Path) -> int | None:
    """The pid of the worker that made the arena file ``path`` (None: not an arena's name)."""
    pid = path.name[len(PREFIX):].split("-", 1)[0]
    return int(pid) if path.name.startswith(PREFIX) and pid.isdigit() else None


def _directory() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def _sweep() -> None:
    """Remove arenas whose worker died before its consumer mapped (and unlinked) them."""
    for path in Path(_directory()).glob(f"{PREFIX}*"):
        pid = _worker_of(path)
        if pid is not None and pid != os.getpid() and not alive(pid):
            try:
                path.unlink()
            except OSError:
                pass
