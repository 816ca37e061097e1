"""Where each sample of a pack goes: its position, and the shard that holds that position.

Both are pure functions of the plan (the sample count, the interleave seed and the samples per
shard), so any process can tell where a sample it rendered belongs without asking anyone, and
the shards are the same bytes whatever executor and however many workers made them.

Interleaving: samples are numbered in rendering order (segment by segment, in time), and the
pack holds rendered sample ``r`` at position ``P(r)`` of a seeded permutation ``P`` (O(1)
memory, ``rayform.permutation``); without a seed, at ``r``. Shard ``k`` holds positions
``[k·n, (k+1)·n)``.

Why interleave when packing and not when reading: a stream of shards written in time order
holds a few episodes at a time, so even a large shuffle buffer gives batches of neighbouring,
nearly identical frames; reading many shards at once or sampling inside fully fetched blocks
of them costs memory, requests and time to the first batch, and still mixes only as far as the
block reaches. A shard that is already a uniform sample costs nothing to read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rayform.permutation import Permutation

SALT = 0x1EAF  # keeps this permutation apart from the datasets' (seed, epoch) ones


@dataclass(frozen=True)
class ShardLayout:
    samples: int
    per_shard: int  # samples in every shard but the last
    seed: int | None  # None: positions in rendering (time) order

    @classmethod
    def for_bytes(cls, samples: int, sample_bytes: float, shard_bytes: int, seed: int | None) -> ShardLayout:
        """Shards of about ``shard_bytes``, given the (estimated) tar bytes of a sample."""
        return cls(samples, max(1, math.ceil(shard_bytes / max(1.0, sample_bytes))), seed)

    @property
    def shards(self) -> int:
        return -(-self.samples // self.per_shard)

    def bounds(self, shard: int) -> tuple[int, int]:
        """The positions ``[start, end)`` shard ``shard`` holds."""
        return shard * self.per_shard, min(self.samples, (shard + 1) * self.per_shard)

    def positions(self, start: int, stop: int) -> np.ndarray:
        """Where rendered samples ``start … stop-1`` lie in the pack."""
        rendered = np.arange(start, stop, dtype=np.int64)
        if self.seed is None:
            return rendered
        return np.asarray(Permutation(self.samples, self.seed, 0, SALT)(rendered), np.int64)

    def order(self) -> np.ndarray:
        """``order[p]``: which rendered sample position ``p`` holds (O(samples) memory: tests, tools)."""
        out = np.empty(self.samples, np.int64)
        step = 1 << 20
        for start in range(0, self.samples, step):
            stop = min(self.samples, start + step)
            out[self.positions(start, stop)] = np.arange(start, stop, dtype=np.int64)
        return out
