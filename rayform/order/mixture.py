"""Weighted mixtures of packs: how many samples each part gives an epoch, and in what order.

An epoch of a mixture has ``N`` = the sizes of the parts of weight above 0 summed (a part of
weight 0 gives nothing, and counts for nothing); part ``i`` gives exactly ``round(w_i · N)``
of them (largest remainders take the rounding, ties to the earlier part, so the counts sum
to ``N``). A part smaller than its count is repeated, a larger one is sampled without
replacement. Everything is a pure function of (sizes, weights, seed, epoch).

The epoch is a sequence of ``N`` slots; slot ``k`` belongs to part ``p`` where ``P(k)`` (a
seeded permutation of the slots) falls in part ``p``'s share ``[C_p−1, C_p)`` of the counts.
Random access (the map-style dataset) reads slot ``k`` as position ``P(k) − C_p−1`` of part
``p``; a stream gives each part's slots its part's positions in slot order (``ranks``), so a
reader of consecutive slots reads a consecutive range of every part (shards front to back).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rayform.errors import InvalidInput
from rayform.permutation import Permutation

SALT = 0x313C
_CHUNK = 4096  # slots per entry of the table of counts before each chunk
_CACHED_CHUNKS = 64


def check_weights(weights: Sequence[float] | np.ndarray) -> np.ndarray:
    w = np.asarray(weights, np.float64)
    if w.ndim != 1 or not len(w) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidInput(f"mixture weights {list(weights)[:8]}: finite, not negative, and not all 0")
    normalized: np.ndarray = w / w.sum()
    return normalized


def epoch_size(sizes: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray | None) -> int:
    """Samples in one epoch: the sizes of the parts that give any (weight above 0) summed; one
    pack's size without weights. A part of weight 0 is left out of the epoch entirely."""
    if weights is None:
        return int(np.sum(sizes))
    return int(np.sum(np.asarray(sizes, np.int64)[check_weights(weights) > 0]))


def counts(sizes: Sequence[int] | np.ndarray, weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """Samples each part gives one epoch: ``round(w_i · N)``, summing to ``N`` (``epoch_size``)."""
    w = check_weights(weights)
    total = epoch_size(sizes, weights)
    exact = w * total
    out: np.ndarray = np.floor(exact).astype(np.int64)
    short = total - int(out.sum())
    # largest remainders first, the earlier part first among equals
    out[np.lexsort((np.arange(len(w)), -(exact - out)))[:short]] += 1
    return out


class MixtureOrder:
    """One epoch's slots of a mixture of parts of ``sizes`` with ``weights``."""

    def __init__(self, sizes: Sequence[int], weights: Sequence[float], seed: int, epoch: int):
        self.sizes = np.asarray(sizes, np.int64)
        if np.any(self.sizes <= 0):
            raise InvalidInput(f"mixture parts of sizes {self.sizes.tolist()[:8]}: every part needs a sample")
        self.counts = counts(self.sizes, weights)
        self.ends = np.cumsum(self.counts)
        self.total = int(self.ends[-1])
        self._slots = Permutation(self.total, seed, epoch, SALT)
        self._within = [Permutation(int(s), seed, epoch, SALT + 1 + i) for i, s in enumerate(self.sizes)]
        self._table: np.ndarray | None = None
        self._chunks: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def parts_of(self, slots: np.ndarray) -> np.ndarray:
        """The part each slot belongs to."""
        return np.asarray(np.searchsorted(self.ends, self._slots(np.asarray(slots, np.int64)), side="right"))

    def lookup(self, slots: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(part, sample id in that part's pack)`` of each slot, for random access."""
        q = self._slots(np.asarray(slots, np.int64))
        parts = np.searchsorted(self.ends, q, side="right")
        position = q - (self.ends[parts] - self.counts[parts])
        samples = np.empty_like(position)
        for p in np.unique(parts):
            mine = parts == p
            samples[mine] = self._within[p](position[mine] % self.sizes[p])
        return parts, samples

    def ranks(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(part, how many earlier slots that part has)`` of each slot: the stream's position in its part.

        Counts before every ``_CHUNK``-th slot are tabled once (one pass over the epoch, memory
        ``N/4096`` rows); within a chunk they are counted, and recent chunks kept."""
        s = np.asarray(slots, np.int64)
        if self._table is None:
            self._table = np.zeros((self.total // _CHUNK + 1, len(self.sizes)), np.int64)
            for i in range(1, len(self._table)):
                chunk = self.parts_of(np.arange((i - 1) * _CHUNK, i * _CHUNK))
                self._table[i] = self._table[i - 1] + np.bincount(chunk, minlength=len(self.sizes))
        parts, out = np.empty_like(s), np.empty_like(s)
        chunk_of = s // _CHUNK
        for c in np.unique(chunk_of).tolist():
            mine = chunk_of == c
            chunk_parts, chunk_ranks = self._chunk(c)
            offset = s[mine] - c * _CHUNK
            parts[mine] = chunk_parts[offset]
            out[mine] = chunk_ranks[offset]
        return parts, out

    def _chunk(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        """Each slot of chunk ``c``: its part and its rank in that part."""
        got = self._chunks.get(c)
        if got is None:
            assert self._table is not None
            if len(self._chunks) >= _CACHED_CHUNKS:
                self._chunks.clear()
            parts = self.parts_of(np.arange(c * _CHUNK, min(self.total, (c + 1) * _CHUNK)))
            ranks = np.empty_like(parts)
            for p in range(len(self.sizes)):
                mine = parts == p
                ranks[mine] = self._table[c, p] + np.arange(int(mine.sum()))
            got = self._chunks[c] = (parts, ranks)
        return got
