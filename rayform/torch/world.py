"""Where this process stands: rank and world size, DataLoader worker and worker count.

Detected in one place, inside the process that reads (a DataLoader worker knows its
worker id only once it runs); everything else takes a ``World`` as an argument.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch.distributed as dist
from torch.utils.data import get_worker_info

from rayform.errors import InvalidInput
from rayform.order.partition import EQUALIZE


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 0  # 0: reading in the main process

    @property
    def workers(self) -> int:
        """Readers per rank (the main process counts as one)."""
        return max(1, self.num_workers)

    @property
    def reader(self) -> int:
        """This reader's number among all ``world_size * workers`` readers."""
        return self.rank * self.workers + self.worker

    @classmethod
    def detect(cls, rank: int | None = None, world_size: int | None = None) -> World:
        if rank is None or world_size is None:
            if dist.is_available() and dist.is_initialized():
                rank, world_size = dist.get_rank(), dist.get_world_size()
            else:
                rank, world_size = rank or 0, world_size or 1
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 0)
        return cls(rank, world_size, worker, workers)


def nodes(env: Mapping[str, str] = os.environ) -> int:
    """Machines in this run, from torchrun's variables (1 where they are not set)."""
    try:
        world, local = int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_WORLD_SIZE", "0"))
    except ValueError:
        return 1
    return max(1, world // local) if local > 0 else 1


@dataclass(frozen=True)
class Split:
    """How each epoch of a streaming dataset is split between ranks: this is ``rank`` of
    ``world_size`` (None: from ``torch.distributed`` when initialised, else 0 of 1);
    ``equalize`` says how every rank gets the same count: ``"pad"`` repeats the first
    samples of the epoch's order to fill the last global batch, ``"drop"`` leaves its part
    out; ``partitions`` is the number of canonical partitions of each epoch (``order.partition``):
    fixed for the life of a run (a resumed state brings its own), it makes the global sequence
    the same at every world size. Each partition is a stretch of the shards: a node reads only
    the partitions its ranks' slots fall in, and its ranks share one cache. None: the number
    of nodes the run starts on (torchrun's ``WORLD_SIZE / LOCAL_WORLD_SIZE``, else 1), so a
    node downloads only its share; give the largest node count the run will see to keep that
    when it grows. More partitions than nodes make each reader read more shards at once
    (a slower first batch, more mapped memory)."""

    rank: int | None = None
    world_size: int | None = None
    equalize: str = "pad"
    partitions: int | None = None

    def __post_init__(self) -> None:
        if self.equalize not in EQUALIZE:
            raise InvalidInput(f"Split equalize {self.equalize!r}: one of {', '.join(EQUALIZE)}")
        if self.partitions is not None and (isinstance(self.partitions, bool) or not isinstance(self.partitions, int)
                                            or not 1 <= self.partitions <= 1 << 20):
            raise InvalidInput(f"Split partitions {self.partitions!r}: a whole number, 1..{1 << 20}")
        if (self.rank is None) != (self.world_size is None):
            raise InvalidInput("Split: give rank and world_size together, or neither")
        if self.rank is not None and self.world_size is not None:
            for name, value in (("rank", self.rank), ("world_size", self.world_size)):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InvalidInput(f"Split {name} {value!r}: a whole number")
            if not 0 <= self.rank < self.world_size:
                raise InvalidInput(f"Split rank {self.rank}: must be in 0..{self.world_size - 1} (world_size {self.world_size})")

    def where(self) -> tuple[int, int]:
        """``(rank, world_size)``: as given, else where it is known now (``torch.distributed``:
        a DataLoader worker does not see the process group, so the dataset asks when it is made)."""
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        here = World.detect()
        return here.rank, here.world_size
