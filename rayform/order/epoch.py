"""The epoch order of what a stream reads: each position → (part, sample id in that part's pack).

One pack: its shards in an order seeded by (seed, epoch), each shard's samples in file
order. (An interleaved pack's shards are each a uniform sample of its slice, so this order
is already well mixed; the partitions' windows, ``order.partition``, shuffle it further.)

A weighted mixture of packs: the epoch's slots (``order.mixture``), part ``p``'s slots taking
that part's positions in slot order, each part's positions laid out the same way over its
own shards (seeded by ``seed ^ (p + 1)``), a part with fewer samples than slots repeating.

Either way consecutive positions are consecutive samples of a few shards, so a reader of
a stretch of positions reads a few shards front to back. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rayform.order.mixture import MixtureOrder
from rayform.order.partition import shard_order
from rayform.permutation import Permutation

_PAD_SALT = 0x9AD << 52


def pad_draw(total: int, seed: int, epoch: int) -> Permutation:
    """Which of an epoch's ``total`` positions its padding repeats, in order (``repeated``)."""
    return Permutation(max(1, total), seed, epoch, _PAD_SALT)


def repeated(positions: np.ndarray | Sequence[int], total: int, draw: Permutation) -> np.ndarray:
    """Positions in ``[0, total)``: one past the epoch's samples (a padded last batch's) is the
    position ``draw`` picks for it, drawn from across the epoch by seed and epoch."""
    total = max(1, total)
    pos = np.asarray(positions, np.int64)
    over = pos >= total
    if over.any():
        pos = pos.copy()
        pos[over] = draw((pos[over] - total) % total)
    return pos


class EpochOrder:
    """Where each position of one epoch lies, for packs whose shards hold ``shard_samples``."""

    def __init__(self, shard_samples: Sequence[Sequence[int] | np.ndarray], weights: Sequence[float] | None,
                 seed: int, epoch: int):
        self.shards = [np.asarray(s, np.int64) for s in shard_samples]
        sizes = [int(s.sum()) for s in self.shards]
        self.mix = MixtureOrder(sizes, weights, seed, epoch) if weights is not None else None
        self.total = self.mix.total if self.mix is not None else sizes[0]
        self._pads = pad_draw(self.total, seed, epoch)
        self._layout = []
        for p, shards in enumerate(self.shards):
            order = shard_order(len(shards), seed ^ (p + 1), epoch)
            ends = np.cumsum(shards[order])
            first_row = np.cumsum(shards) - shards
            self._layout.append((order, ends, first_row, sizes[p]))

    def samples(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(part, sample id in its pack)`` of each position. A position past the epoch's
        samples (a padded last batch's) repeats one drawn from across the epoch, another for
        each seed and epoch (not its first ones: of a pack of one shard, the same every epoch)."""
        pos = repeated(positions, self.total, self._pads)
        if self.mix is None:
            parts, rank = np.zeros_like(pos), pos
        else:
            parts, rank = self.mix.ranks(pos)
        ids = np.empty_like(pos)
        for p in np.unique(parts).tolist():
            mine = parts == p
            order, ends, first_row, size = self._layout[p]
            q = rank[mine] % size
            i = np.searchsorted(ends, q, side="right")
            shard = order[i]
            ids[mine] = first_row[shard] + q - (ends[i] - self.shards[p][shard])
        return parts, ids
