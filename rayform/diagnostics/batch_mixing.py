"""How well a loader mixes: how many distinct episodes a batch holds, against uniform sampling.

A batch of ``b`` samples drawn uniformly from ``k`` equally long episodes holds on average
``k·(1 − (1 − 1/k)^b)`` distinct episodes. A loader that streams shards written in time order
holds far fewer (neighbouring frames of a few episodes); the ratio of the two is the
measure. The lag-1 correlation of consecutive samples' episodes is the other face of it:
how much more often than chance a sample comes from the same episode as the one before,
``(p_same − p_chance) / (1 − p_chance)`` with ``p_chance = Σ f_e²`` over the episodes'
shares: 1 when every sample follows one of its own episode, 0 when they are unrelated (the
lag-1 autocorrelation of the episodes' indicator vectors).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Mixing:
    batches: int
    mean_distinct: float  # distinct episodes per batch, on average
    uniform: float  # what uniform sampling gives for the same batch size and episodes
    lag1: float  # lag-1 correlation of consecutive samples' episodes (0: unrelated, 1: always the same)

    @property
    def ratio(self) -> float:
        return self.mean_distinct / self.uniform if self.uniform else 0.0

    def __str__(self) -> str:
        return (f"{self.mean_distinct:.1f} distinct episodes per batch, uniform sampling {self.uniform:.1f} "
                f"({self.ratio:.2f}×); lag-1 correlation of episodes {self.lag1:+.2f}")


def uniform_distinct(episodes: int, batch: int) -> float:
    """Expected distinct episodes in a batch drawn uniformly from ``episodes`` equal ones."""
    return float(episodes * (1 - (1 - 1 / episodes) ** batch)) if episodes else 0.0


def mixing(batches: Sequence[Sequence[Hashable]], episodes: int | None = None) -> Mixing:
    """The mixing of ``batches`` (each a sequence of episode ids, in the order yielded); full
    batches only. ``episodes``: how many the slice has (else: how many were seen)."""
    size = max((len(b) for b in batches), default=0)
    full = [b for b in batches if len(b) == size]
    sequence = [e for b in batches for e in b]
    k = episodes or len(set(sequence))
    lag1 = 0.0
    if len(sequence) > 1:
        _, counts = np.unique(np.array([str(e) for e in sequence]), return_counts=True)
        chance = float(((counts / len(sequence)) ** 2).sum())
        same = float(np.mean([a == b for a, b in zip(sequence, sequence[1:])]))
        lag1 = (same - chance) / (1 - chance) if chance < 1 else 1.0
    mean = float(np.mean([len(set(b)) for b in full])) if full else 0.0
    return Mixing(len(full), mean, uniform_distinct(k, size), lag1)
