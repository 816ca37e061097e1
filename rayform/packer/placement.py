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
from dataclasses import dataclass, field
from typing import Any

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

    def shard_of(self, positions: np.ndarray) -> np.ndarray:
        return np.asarray(positions, np.int64) // self.per_shard

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


@dataclass(frozen=True)
class ClipLayout:
    """A video pack's layout: as ``ShardLayout``, in clips. Each segment's samples (in
    rendering order) are cut into clips of ``clip`` (its last shorter); the seeded permutation
    orders the clips, whose samples stay together and in time order; a shard holds
    ``per_shard_clips`` clips (the last fewer), so no clip spans two shards."""

    segment_samples: tuple[int, ...]
    clip: int
    per_shard_clips: int
    seed: int | None
    _arrays: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def for_bytes(cls, segment_samples: tuple[int, ...], clip: int, sample_bytes: float, shard_bytes: int,
                  seed: int | None) -> ClipLayout:
        per_shard = max(1, math.ceil(shard_bytes / max(1.0, sample_bytes)))
        return cls(tuple(segment_samples), clip, max(1, -(-per_shard // clip)), seed)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": {}}  # what a process makes, not what it sends

    @property
    def samples(self) -> int:
        return sum(self.segment_samples)

    @property
    def per_shard(self) -> int:
        return self.per_shard_clips * self.clip

    @property
    def shards(self) -> int:
        return -(-len(self._clips()[0]) // self.per_shard_clips)

    def bounds(self, shard: int) -> tuple[int, int]:
        ends = self._clips()[2]
        first, last = shard * self.per_shard_clips, min(len(ends), (shard + 1) * self.per_shard_clips)
        return int(ends[first - 1]) if first else 0, int(ends[last - 1])

    def shard_of(self, positions: np.ndarray) -> np.ndarray:
        ends = self._clips()[2]
        return np.searchsorted(ends, np.asarray(positions, np.int64), side="right") // self.per_shard_clips

    def positions(self, start: int, stop: int) -> np.ndarray:
        """Where rendered samples ``start … stop-1`` lie in the pack."""
        first, start_of, _ = self._clips()
        rendered = np.arange(start, stop, dtype=np.int64)
        clip = np.searchsorted(first, rendered, side="right") - 1
        return np.asarray(start_of[clip] + rendered - first[clip], np.int64)

    def _clips(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per clip in rendering order: its first rendered sample and its first position; and
        per clip in pack order, where it ends (O(clips) memory, made once per process)."""
        if "first" not in self._arrays:
            counts = np.asarray(self.segment_samples, np.int64)
            per_segment = -(-counts // self.clip)
            seg_first = np.cumsum(counts) - counts
            clip_seg = np.repeat(np.arange(len(counts)), per_segment)
            within = np.arange(len(clip_seg)) - np.repeat(np.cumsum(per_segment) - per_segment, per_segment)
            first = seg_first[clip_seg] + within * self.clip
            sizes = np.minimum(self.clip, counts[clip_seg] - within * self.clip)
            if self.seed is None:
                rank = np.arange(len(first), dtype=np.int64)
            else:
                rank = np.asarray(Permutation(len(first), self.seed, 0, SALT)(np.arange(len(first))), np.int64)
            in_order = np.empty_like(rank)
            in_order[rank] = np.arange(len(rank))
            ends = np.cumsum(sizes[in_order])
            self._arrays.update(first=first, start_of=(ends - sizes[in_order])[rank], ends=ends)
        a = self._arrays
        return a["first"], a["start_of"], a["ends"]
