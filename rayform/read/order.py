"""The orders of reading that depend on (seed, epoch, …) only, never on pid or time: the
map-style dataset's permutation of a pack's samples (``rayform.permutation``) and the
streaming shuffle buffer's RNG."""

from __future__ import annotations

import random

import numpy as np

from rayform.permutation import Permutation

__all__ = ["Permutation", "reader_rng"]

def reader_rng(seed: int, epoch: int, rank: int, worker: int) -> random.Random:
    """The shuffle buffer's RNG: from (seed, epoch, rank, worker) only, never pid or time."""
    state = np.random.SeedSequence([seed & (2**63 - 1), epoch, rank, worker, 0x5B]).generate_state(2, np.uint64)
    return random.Random(int(state[0]) << 64 | int(state[1]))
