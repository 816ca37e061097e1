"""The streaming shuffle buffer's RNG: from (seed, epoch, rank, worker) only, never pid or time.
(The map-style dataset's order is ``rayform.permutation``.)"""

from __future__ import annotations

import random

import numpy as np


def reader_rng(seed: int, epoch: int, rank: int, worker: int) -> random.Random:
    """The shuffle buffer's RNG: from (seed, epoch, rank, worker) only, never pid or time."""
    state = np.random.SeedSequence([seed & (2**63 - 1), epoch, rank, worker, 0x5B]).generate_state(2, np.uint64)
    return random.Random(int(state[0]) << 64 | int(state[1]))
