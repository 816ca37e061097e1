"""``ClipBatchSampler``: an ``EpisodeDataset``'s clip-aware order as a batch sampler, for the
familiar ``DataLoader(dataset, batch_sampler=ClipBatchSampler(dataset, 64), num_workers=2)``.

It is the order ``EpisodeDataset(batch_size=…)`` reads in (``order.lanes``): each batch takes
its samples from as many clips, and a clip's samples come ``clip_stride`` batches apart, so the
DataLoader worker that gets those batches decodes the clip once. The sampler hands out the
batches in turn (``0, 1, 2, …``; under DDP, rank ``r`` of ``W`` the batches ``r, r + W, …``)
and chooses the stride that keeps a clip's batches with one worker of one rank: a multiple of
``W × num_workers``. So a plain DataLoader over a video pack decodes each clip about once, and
its batches are as mixed as the pack (a uniform sample of the slice).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from torch.utils.data import Sampler

from rayform.errors import InvalidInput
from rayform.torch.streaming import MAX_CLIP_STRIDE, check_batch_size

if TYPE_CHECKING:
    from rayform.torch.episode import EpisodeDataset


class ClipBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices of ``dataset`` in its clip-aware order.

    ``num_workers``: the DataLoader's (a clip's batches go to one of them); ``num_replicas`` and
    ``rank``: the DDP world (default: ``torch.distributed``'s when it is initialized, else one
    process). Every rank gets as many batches (``drop_last``: the whole ones only; else the
    last rank's turns wrap to the epoch's first batches, as ``DistributedSampler`` pads).
    ``set_epoch(e)`` sets the dataset's epoch: a new order, the same in every process."""

    def __init__(self, dataset: EpisodeDataset, batch_size: int, *, num_workers: int = 0, drop_last: bool = False,
                 num_replicas: int | None = None, rank: int | None = None):
        size = check_batch_size(batch_size)
        if size is None:
            raise InvalidInput("ClipBatchSampler: batch_size is required")
        world, here = _world(num_replicas, rank)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise InvalidInput(f"ClipBatchSampler num_workers {num_workers!r}: the DataLoader's, 0 or more")
        readers = world * max(1, num_workers)
        stride = readers * max(1, -(-dataset.clip_stride // readers))  # a multiple of every reader, at least the dataset's
        if stride > MAX_CLIP_STRIDE:
            stride = readers if readers <= MAX_CLIP_STRIDE else MAX_CLIP_STRIDE  # past it, a few readers decode a clip
        self.dataset, self.batch_size, self.drop_last = dataset, size, drop_last
        self.world, self.rank = world, here
        dataset.order_in_batches(size, stride)
        whole, rest = divmod(len(dataset), size)
        self.batches = whole + (0 if drop_last or not rest else 1)  # of the epoch, every rank's
        self.per_rank = self.batches // world if drop_last else math.ceil(self.batches / world)

    def __len__(self) -> int:
        return self.per_rank

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        n = len(self.dataset)
        for turn in range(self.per_rank):
            batch = (self.rank + turn * self.world) % max(1, self.batches)
            yield list(range(batch * self.batch_size, min(n, (batch + 1) * self.batch_size)))


def _world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        import torch.distributed as dist

        ready = dist.is_available() and dist.is_initialized()
        num_replicas = num_replicas if num_replicas is not None else dist.get_world_size() if ready else 1
        rank = rank if rank is not None else dist.get_rank() if ready else 0
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1 \
            or isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
        raise InvalidInput(f"ClipBatchSampler: rank {rank!r} of {num_replicas!r} replicas")
    return num_replicas, rank
