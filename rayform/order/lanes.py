"""The window permutation of a video pack's stream: lanes, so each clip is decoded once.

A video pack holds a clip's samples next to each other (``pack.layout``); a shuffle window
that scattered them over its global batches would have every DataLoader worker (and rank)
that gets one of them decode the whole clip. Instead a window of ``rows`` global batches of
a partition's ``b`` slots is cut into ``stride × b`` lanes: slot ``i`` of the batches
``g, g + stride, g + 2·stride, …`` of the window is lane ``(g, i)``. Each lane reads a run
of consecutive samples of the window (about ``rows / stride``: a few clips, one after the
other in time), and which run goes to which slot of its batches is a seeded permutation
per (epoch, partition, window, g). So:

- a batch takes its ``b`` samples from ``b`` runs: from ``b`` different clips, as mixed
  as the pack's interleaving makes the window (a uniform sample of the slice);
- a clip's samples land ``stride`` global batches apart in one slot, so they go to one rank
  and, where the DataLoader's workers divide ``stride``, one worker: it decodes the clip
  once and keeps its frames until those batches come (``sample.clip_frames``);
- a worker holds about ``b × stride / workers`` clips' frames at a time;
- nothing depends on the world size or the number of workers: the global batches are the
  same at every topology, as with any window (``order.partition``).

Runs that straddle two clips, and lanes in other workers, decode a clip more than once
(a few percent with runs of 8 clips); the samples are the same either way.

Which clips make a run is itself seeded by the epoch: the window's samples are taken in
blocks of ``clip`` (a clip's length), the blocks in a seeded order, and the runs cut from
that. Without it, a pack of one shard (whose epoch order is its file order) would make the
same batches every epoch and every seed, the lanes only moving them from slot to slot.
"""

from __future__ import annotations

import numpy as np

from rayform.permutation import Permutation

_SALT = 0x1A7E << 48
_BLOCK_SALT = 0xB10C << 44


class LanePermutation:
    """Positions ``0 … n−1`` of one window (``b`` slots a batch; any partial last batch kept
    in place) to the window's samples, lane by lane."""

    def __init__(self, n: int, b: int, stride: int, seed: int, epoch: int, key: int, clip: int = 0):
        """``clip``: the blocks of consecutive samples whose order is seeded (0: none)."""
        self.n, self.b, self.stride = n, b, stride
        self.clip = clip
        self.blocks = Permutation(n // clip, seed, epoch, _BLOCK_SALT ^ key) if clip and n // clip > 1 else None
        self.rows = n // b  # whole batches of the window; the rest stay in place
        g = np.arange(stride)
        self.rows_of = (self.rows - g + stride - 1) // stride  # batches of the window in lane group g
        self.base = np.concatenate([[0], np.cumsum(self.rows_of * b)[:-1]]).astype(np.int64)
        self.perms = [Permutation(b, seed, epoch, _SALT ^ key ^ (k << 40)) for k in range(stride)]

    def __call__(self, p: np.ndarray) -> np.ndarray:
        p = np.asarray(p, np.int64)
        out = p.copy()
        whole = p < self.rows * self.b
        t, i = np.divmod(p[whole], self.b)
        g, r = t % self.stride, t // self.stride
        lane = np.empty_like(i)
        for k in np.unique(g).tolist():
            mine = g == k
            lane[mine] = self.perms[k](i[mine])
        out[whole] = self.base[g] + lane * self.rows_of[g] + r
        if self.blocks is not None:  # which clips a run reads, seeded: (block, place in it) to (its block's place, …)
            inside = out < self.blocks.n * self.clip
            block, at = np.divmod(out[inside], self.clip)
            out[inside] = self.blocks(block) * self.clip + at
        return np.asarray(out, np.int64)
