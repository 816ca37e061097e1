"""Who reads what in one epoch of a stream: pure functions of the epoch's size, the global
batch, the number of partitions, the seed and the epoch, never of the world size or the
number of DataLoader workers. No I/O.

An epoch is ``K`` global batches of ``G`` samples (``G`` = per-rank batch × world size;
``K`` = ⌈N/G⌉ with ``equalize="pad"``, ⌊N/G⌋ with ``"drop"``). With ``"pad"`` the last
``D = K·G − N`` slots of the last global batch (fewer than ``G``) are padding, and nothing
else is: each repeats one of the epoch's samples (positions ``N … N+D−1`` of the
epoch's order, which ``order.epoch`` maps to samples drawn by seed and epoch). With ``"drop"`` the last
``N − K·G`` positions of the epoch's order (another few each epoch) are left out.

The slots of a global batch are cut into ``P`` canonical partitions: partition ``c`` gives
``b_c = ⌊(c+1)G/P⌋ − ⌊cG/P⌋`` samples to every global batch, ``K·b_c`` in the epoch, of
which its share of the last batch's padding, ``d_c``, are its last. Its ``K·b_c − d_c``
samples are a consecutive stretch of the epoch order (after the stretches of the partitions
before it), so of a few shards. Inside a partition, consecutive windows of ``window``
positions are each permuted (seeded by seed, epoch, partition and window), after a ramp of
windows of ``b_c``, ``2b_c``, ``4b_c`` … positions, so that the first global batches read the
first samples of the epoch's first shards (a stream starts once those have arrived).

Global batch ``k`` is, partition after partition, each partition's items
``[k·b_c, (k+1)·b_c)``. Rank ``r`` of ``R`` takes its ``G/R`` consecutive slots of it, so
the global batch concatenated over the ranks in rank order is the same at every world size,
and a rank reads only the partitions its slots fall in (about ``P/R`` of them, or one shared
with ``R/P − 1`` other ranks). Worker ``w`` of ``n`` makes the rank's steps
``k ≡ w (mod n)``: a DataLoader hands out its workers' batches round robin, so the rank's
batches come out in step order whatever ``n`` is. A run stopped after ``k`` global batches
resumes at step ``k`` at any world size and any worker count.
"""

from __future__ import annotations

import numpy as np

from rayform.errors import InvalidInput
from rayform.order.lanes import LanePermutation
from rayform.permutation import Permutation

EQUALIZE = ("pad", "drop")
_WINDOW_SALT = 0x57 << 56
# The version of the epoch order EpochPlan makes (windows ramping up since 2; padding kept at
# the end of its partition since 3, where 2 shuffled it into the last window; padding in the
# last global batch only since 4, where 3 put it all in the last partitions, spilling into the
# batches before; and a video pack's lanes reading its clips in an order seeded by the epoch;
# padding repeating samples drawn from across the epoch by seed and epoch since 5, where 4
# repeated its first ones): a saved state says the one it was saved under, so a reader that
# makes another order can tell. Where an epoch has no padding, orders 4 and 5 are the same,
# and for a pack without video 2 and 3 too.
ORDER = 5
_CACHED_WINDOWS = 1024


def steps(total: int, global_batch: int, equalize: str = "pad") -> int:
    """Global batches in an epoch of ``total`` samples."""
    if equalize not in EQUALIZE:
        raise InvalidInput(f"equalize {equalize!r}: one of {EQUALIZE}")
    return -(-total // global_batch) if equalize == "pad" else total // global_batch


def shard_order(n_shards: int, seed: int, epoch: int) -> np.ndarray:
    """The shards of a pack in the order an epoch lays them out, seeded by (seed, epoch)."""
    rng = np.random.default_rng([seed & (2**63 - 1), epoch & (2**63 - 1), 0x5A4D])
    return rng.permutation(n_shards)


def _whole(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise InvalidInput(f"{name} {str(value)[:40]!r}: a whole number, at least {least}")
    return int(value)


class EpochPlan:
    """One epoch's global batches: which epoch positions each slot of each step reads."""

    def __init__(self, total: int, global_batch: int, partitions: int, window: int, seed: int, epoch: int,
                 equalize: str = "pad", lanes: tuple[int, ...] | None = None):
        """``lanes``: ``(stride, run)`` or ``(stride, run, clip)`` for a video pack: windows are
        permuted in lanes (``order.lanes``) of about ``run`` samples, ``stride`` global batches
        apart, instead of at random, their clips (blocks of ``clip`` samples) in a seeded order;
        a window is then ``stride × run`` global batches (``window`` > 1 turns it on)."""
        self.total = _whole("samples", total, 0)
        self.global_batch = _whole("global batch", global_batch, 1)
        self.partitions = _whole("partitions", partitions, 1)
        self.window = _whole("shuffle window", window, 0)
        self.seed, self.epoch = seed, epoch
        self.lanes: tuple[int, int, int] | None = None
        if lanes is not None and self.window > 1:
            self.lanes = (_whole("clip stride", lanes[0], 1), _whole("lane run", lanes[1], 1),
                          _whole("clip", lanes[2], 0) if len(lanes) > 2 else 0)
        self.steps = steps(self.total, self.global_batch, equalize)
        # slots [bounds[c], bounds[c+1]) of every global batch belong to partition c
        self.bounds = np.arange(self.partitions + 1, dtype=np.int64) * self.global_batch // self.partitions
        # the padding: the last `padded` slots of the last global batch, pads[c] of them partition c's
        first_pad = self.global_batch - self.padded
        self.pads = np.clip(self.bounds[1:] - np.maximum(self.bounds[:-1], first_pad), 0, None)
        self.real = self.steps * np.diff(self.bounds) - self.pads  # each partition's samples
        self.starts = np.concatenate([[0], np.cumsum(self.real)[:-1]])  # where its stretch of the epoch order starts
        self.pad_starts = self.total + np.concatenate([[0], np.cumsum(self.pads)[:-1]])
        self._perms: dict[tuple[int, ...], Permutation | LanePermutation] = {}

    def __len__(self) -> int:
        return self.steps

    def positions(self, steps: np.ndarray | list[int] | range, lo: int, hi: int) -> np.ndarray:
        """Epoch positions of slots ``[lo, hi)`` of each of ``steps``, step after step."""
        if not 0 <= lo <= hi <= self.global_batch:
            raise InvalidInput(f"slots [{lo}, {hi}): outside a global batch of {self.global_batch}")
        k = np.asarray(steps, np.int64)
        if len(k) and (k.min() < 0 or k.max() >= self.steps):
            raise InvalidInput(f"steps outside 0..{self.steps - 1}")
        slots = np.arange(lo, hi, dtype=np.int64)
        part = np.searchsorted(self.bounds, slots, side="right") - 1
        width = self.bounds[part + 1] - self.bounds[part]
        within = (k[:, None] * width[None, :] + (slots - self.bounds[part])[None, :]).ravel()
        part = np.broadcast_to(part, (len(k), len(slots))).ravel()
        width = np.broadcast_to(width, (len(k), len(slots))).ravel()
        # a partition's last positions are its padding: they stay there, in the last global batch
        real = self.real[part]
        shuffled: np.ndarray = self._shuffled(part, within, real, width)
        return np.asarray(np.where(shuffled < real, self.starts[part] + shuffled, self.pad_starts[part] + shuffled - real))

    @property
    def padded(self) -> int:
        """Slots of the epoch's last global batch that are padding (``equalize="pad"``): each
        repeats one of the epoch's samples (``order.epoch``)."""
        return max(0, self.steps * self.global_batch - self.total)

    def _shuffled(self, part: np.ndarray, within: np.ndarray, real: np.ndarray, width: np.ndarray) -> np.ndarray:
        """Each position inside its partition, permuted within its window (at random, or in
        lanes for a video pack); padding positions (from ``real`` on, the partition's samples)
        are left where they are, at the end."""
        if self.window <= 1 or not len(within):
            return within
        window, start, size = self._windows(within, width)
        out: np.ndarray = within.copy()
        keys, inverse = np.unique(np.stack([part, window]), axis=1, return_inverse=True)
        inverse = inverse.ravel()
        for j, (c, w) in enumerate(keys.T.tolist()):
            mine = np.flatnonzero(inverse == j)
            first = int(start[mine[0]])
            n = min(int(size[mine[0]]), int(real[mine[0]]) - first)  # the window's samples, padding left out
            b = int(width[mine[0]])
            mine = mine[within[mine] < first + n]  # none, where only the window's padding is asked
            if n <= 1 or not len(mine):
                continue
            out[mine] = first + self._perm(c, w, n, b)(within[mine] - first)
        return out

    def _windows(self, within: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(index, start, size)`` of the window of each position inside its partition.

        The first windows ramp up: ``b``, ``2b``, ``4b`` … positions (``b``, the partition's
        share of one global batch), then ``window`` each. So the first global batch reads the
        first ``b`` positions of its partitions, the first shard's first samples: a stream
        starts as soon as they have arrived, not once the ``window`` positions around them
        have (a shard's worth of bytes)."""
        full = self.window if self.lanes is None else width * self.lanes[0] * self.lanes[1]
        base = np.minimum(width, full)
        ramp = np.ceil(np.log2(full / base)).astype(np.int64)  # windows before full size: b·2**ramp ≥ window
        if self.lanes is not None:
            # no ramp: a small window of a video pack is a few clips, each batch of it a few
            # episodes; the first lanes' samples lie within a few MB of the first shard anyway
            ramp = np.zeros_like(ramp)
        ramp_end = base * ((1 << ramp) - 1)
        in_ramp = within < ramp_end
        j = np.floor(np.log2((within + base) // base)).astype(np.int64)  # (within + b) // b in [2**j, 2**(j+1))
        index = np.where(in_ramp, j, ramp + (within - ramp_end) // full)
        start = np.where(in_ramp, base * ((1 << j) - 1), ramp_end + (index - ramp) * full)
        size = np.where(in_ramp, base << j, full)
        return index, start, size

    def _perm(self, part: int, window: int, size: int, width: int) -> Permutation | LanePermutation:
        key = (part, window, size)
        perm = self._perms.get(key)
        if perm is None:
            if len(self._perms) >= _CACHED_WINDOWS:
                self._perms.clear()
            if self.lanes is None:
                perm = Permutation(size, self.seed, self.epoch, _WINDOW_SALT | part << 32 | window)
            else:
                perm = LanePermutation(size, width, self.lanes[0], self.seed, self.epoch, part << 32 | window,
                                       self.lanes[2])
            self._perms[key] = perm
        return perm


def rank_slots(rank: int, batch: int) -> tuple[int, int]:
    """The slots ``[lo, hi)`` of every global batch that ``rank`` reads (``batch`` per rank)."""
    return rank * batch, (rank + 1) * batch


def reader_steps(n_steps: int, first: int, worker: int, workers: int) -> range:
    """The steps a reader makes from ``first`` on: ``worker`` of ``workers`` takes every
    ``workers``-th, starting ``worker`` after ``first``."""
    return range(first + worker, n_steps, max(1, workers))
