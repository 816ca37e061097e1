"""Interleaving: a slice's samples laid out in a seeded permuted order, so that every shard is a
uniform sample of the whole slice.

Samples are rendered in time order (a segment's frames are decoded front to back, which is
what video and the renderer's caches want), spilled to one local file as they come, then
read back in the order of the permutation: position ``p`` of the pack holds the sample
rendered ``P⁻¹(p)``-th. Memory is two int64 per sample (where each sample lies in the spill);
disk is one more copy of the slice's samples while packing. The permutation depends on
(seed, sample count) only, so the pack's bytes do not depend on how it was rendered.

Why here and not when reading: a stream of shards written in time order holds a few episodes
at a time, so even a large shuffle buffer gives batches of neighbouring, nearly identical
frames; reading many shards at once or sampling inside fully fetched blocks of them costs
memory, requests and time to the first batch, and still mixes only as far as the block
reaches. A shard that is already a uniform sample costs nothing to read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

import numpy as np

from rayform.permutation import Permutation

SALT = 0x1EAF  # keeps this permutation apart from the datasets' (seed, epoch) ones


def layout_order(samples: int, seed: int) -> np.ndarray:
    """``order[p]``: which sample, in rendering order, the pack holds at position ``p``."""
    perm = Permutation(samples, seed, 0, SALT)
    order = np.empty(samples, np.int64)
    step = 1 << 20
    for start in range(0, samples, step):  # in blocks: the permutation's temporaries stay small
        rendered = np.arange(start, min(samples, start + step), dtype=np.int64)
        order[perm(rendered)] = rendered
    return order


class Spill:
    """Rendered samples on local disk, written in rendering order, read back in any order.

    Each sample is written as its key and its members (in ``members`` order) back to back;
    the sizes of those parts are kept in memory with the sample's offset."""

    def __init__(self, path: str, members: list[str], samples: int):
        self.path, self.members = path, members
        self._f = open(path, "w+b")
        self._offsets = np.zeros(samples + 1, np.int64)
        self._sizes = np.zeros((samples, 1 + len(members)), np.int64)
        self._n = 0

    def add(self, key: str, sample: dict[str, bytes]) -> None:
        parts = [key.encode(), *(sample[m] for m in self.members)]
        for j, part in enumerate(parts):
            self._f.write(part)
            self._sizes[self._n, j] = len(part)
        self._offsets[self._n + 1] = self._offsets[self._n] + int(self._sizes[self._n].sum())
        self._n += 1

    def in_order(self, order: Iterable[int]) -> Iterator[tuple[str, dict[str, bytes]]]:
        """The samples at ``order`` (rendering numbers), one at a time, read by offset."""
        self._f.flush()
        fd = self._f.fileno()
        for i in order:
            start, end = int(self._offsets[i]), int(self._offsets[i + 1])
            data = os.pread(fd, end - start, start)
            bounds = np.concatenate([[0], np.cumsum(self._sizes[i])]).tolist()
            key = data[bounds[0]:bounds[1]].decode()
            yield key, {m: data[bounds[j + 1]:bounds[j + 2]] for j, m in enumerate(self.members)}

    def __len__(self) -> int:
        return self._n

    def close(self) -> None:
        self._f.close()
