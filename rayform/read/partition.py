"""Who reads what in one epoch of a stream: pure functions of sizes, topology, seed and epoch.

The epoch's global order is the pack's shards in an order seeded by (seed, epoch), each
shard's samples in file order. Rank ``r`` takes the ``per_rank`` consecutive positions
starting at ``r * per_rank`` (wrapping round to the start when padding), and its workers
split that range into consecutive parts (the first ones one longer when it does not divide).
So in one epoch every sample is read exactly once across all ranks and workers (up to the
padding or drop that makes every rank's count equal), fewer shards than readers still
works (a shard can be split between readers), and every rank yields the same number of
samples, so DDP never waits on a rank that ran out. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rayform.errors import InvalidInput

EQUALIZE = ("pad", "drop")


@dataclass(frozen=True)
class Run:
    """Samples ``[first, stop)`` of shard ``shard`` (the shard's own sample numbering)."""

    shard: int
    first: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.first


def shard_order(n_shards: int, seed: int, epoch: int) -> np.ndarray:
    rng = np.random.default_rng([seed & (2**63 - 1), epoch & (2**63 - 1), 0x5A4D])
    return rng.permutation(n_shards)


def per_rank(total: int, world_size: int, equalize: str = "pad") -> int:
    """Samples each rank yields in an epoch."""
    if equalize not in EQUALIZE:
        raise InvalidInput(f"equalize {equalize!r}: one of {EQUALIZE}")
    return -(-total // world_size) if equalize == "pad" else total // world_size


def worker_span(count: int, workers: int, worker: int) -> tuple[int, int]:
    """``[start, stop)`` of a rank's ``count`` positions that ``worker`` reads."""
    base, extra = divmod(count, workers)
    start = worker * base + min(worker, extra)
    return start, start + base + (1 if worker < extra else 0)


def runs_for(
    shard_sizes: list[int] | np.ndarray,
    rank: int,
    world_size: int,
    worker: int,
    workers: int,
    seed: int,
    epoch: int,
    equalize: str = "pad",
) -> list[Run]:
    """The runs one reader streams this epoch, in order."""
    sizes = np.asarray(shard_sizes, np.int64)
    total = int(sizes.sum())
    if total == 0:
        return []
    count = per_rank(total, world_size, equalize)
    lo, hi = worker_span(count, workers, worker)
    return runs_between(sizes, shard_order(len(sizes), seed, epoch), rank * count + lo, rank * count + hi)


def runs_between(sizes: np.ndarray, order: np.ndarray, pos: int, stop: int) -> list[Run]:
    """The runs that hold positions ``[pos, stop)`` of the sequence of shards ``order``, each
    read front to back, repeated as often as needed (positions wrap round)."""
    sizes = np.asarray(sizes, np.int64)
    total = int(sizes.sum())
    ends = np.cumsum(sizes[order])
    starts = ends - sizes[order]
    out: list[Run] = []
    while pos < stop:
        g = pos % total  # padding wraps round to the start of the epoch's order
        i = int(np.searchsorted(ends, g, side="right"))
        first = g - int(starts[i])
        take = min(int(sizes[order[i]]) - first, stop - pos)
        out.append(Run(int(order[i]), first, first + take))
        pos += take
    return out
