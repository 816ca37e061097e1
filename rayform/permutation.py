"""A seeded permutation of ``range(n)`` that costs O(1) memory, whatever ``n`` is.

A 4-round Feistel network on the smallest even-bit domain ≥ n, with cycle walking back into
``[0, n)``. Its keys derive from (seed, epoch, salt) only, never from pid or time, so the same
arguments give the same order in every process. Used to read (the map-style dataset's order
of each epoch) and to write (the order in which an interleaved pack lays out its samples).
"""

from __future__ import annotations

import numpy as np

from rayform.errors import InvalidInput

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
ROUNDS = 4


class Permutation:
    """``perm(i)``: where index ``i`` goes, vectorised over numpy arrays."""

    def __init__(self, n: int, seed: int, epoch: int, salt: int = 0):
        if n < 0:
            raise InvalidInput(f"permutation of {n} elements: n must be at least 0")
        self.n = n
        bits = max(2, int(n - 1).bit_length() if n > 1 else 1)
        self.half = (bits + 1) // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = np.random.SeedSequence([seed & (2**63 - 1), epoch & (2**63 - 1), salt]).generate_state(
            ROUNDS, np.uint64)

    def __len__(self) -> int:
        return self.n

    def _round(self, x: np.ndarray, key: np.uint64) -> np.ndarray:
        x = (x ^ key) * _M1
        x ^= x >> np.uint64(29)
        x *= _M2
        x ^= x >> np.uint64(32)
        result: np.ndarray = x & self.mask
        return result

    def _feistel(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self.half)
        left, right = x >> h, x & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        result: np.ndarray = (left << h) | right
        return result

    def __call__(self, index: np.ndarray | int) -> np.ndarray:
        i = np.asarray(index, dtype=np.int64)
        if np.any((i < 0) | (i >= self.n)):
            raise IndexError(f"index out of range for a permutation of {self.n}")
        with np.errstate(over="ignore"):
            y = self._feistel(i.astype(np.uint64))
            out = y >= np.uint64(self.n)
            while np.any(out):  # cycle walking: a bijection on the domain stays one on [0, n)
                y[out] = self._feistel(y[out])
                out = y >= np.uint64(self.n)
        return y.astype(np.int64)
