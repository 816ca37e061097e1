"""The statistics of a pack (``rayform.pack.stats``), measured while its shards are written.

Each shard's writer measures its own samples, in the pack's order (``ShardStats``), and the
driver merges the shards' parts in shard order (``merge``): the result does not depend on
which process wrote which shard, nor on how many there were. Records are gathered ``CHUNK``
at a time and reduced together; moments are merged chunk by chunk and shard by shard in
float64 (Chan et al.'s pairwise update), so memory stays at one chunk and a bounded quantile
sample (the samples at every ``stride``-th position of the pack), however large the pack.
About 40 µs a sample (the record's msgpack, mostly), spread over the writers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from rayform.codec import records
from rayform.pack.layout import StreamSchema
from rayform.pack.stats import PERCENTILES, QUANTILE_SAMPLE, StreamStats

CHUNK = 1 << 14  # rows merged into the moments at a time
DELTA = "_delta"


class _Moments:
    def __init__(self) -> None:
        self.n = 0
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None
        self.min: np.ndarray | None = None
        self.max: np.ndarray | None = None

    def add(self, rows: np.ndarray) -> None:
        if len(rows):
            mean = rows.mean(axis=0)
            self.merge(len(rows), mean, ((rows - mean) ** 2).sum(axis=0), rows.min(axis=0), rows.max(axis=0))

    def merge(self, nb: int, mean_b: np.ndarray, m2_b: np.ndarray, min_b: np.ndarray, max_b: np.ndarray) -> None:
        if self.mean is None or self.m2 is None or self.min is None or self.max is None:
            self.n, self.mean, self.m2, self.min, self.max = nb, mean_b, m2_b, min_b, max_b
            return
        n = self.n + nb
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (nb / n)
        self.m2 = self.m2 + m2_b + delta**2 * (self.n * nb / n)
        self.min, self.max, self.n = np.minimum(self.min, min_b), np.maximum(self.max, max_b), n


@dataclass
class StatsPart:
    """One shard's share of the statistics: per key its moments (n, mean, m2, min, max) and
    its rows of the pack's quantile sample."""

    moments: dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    sample: dict[str, list[np.ndarray]] = field(default_factory=dict)


def quantile_stride(total: int) -> int:
    """The pack's quantile sample: the samples at positions that are multiples of this."""
    return max(1, math.ceil(total / QUANTILE_SAMPLE))


class ShardStats:
    """Feeds on each sample's lowdim record and pack position (``add``), in pack order;
    ``part`` at the end."""

    def __init__(self, schema: Mapping[str, StreamSchema], stride: int):
        self.streams = [n for n, s in schema.items() if s.kind != "image"]
        self.deltas = [n for n in self.streams if schema[n].kind == "array"]
        self.stride = stride
        keys = self.streams + [n + DELTA for n in self.deltas]
        self._moments = {k: _Moments() for k in keys}
        self._sample: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        self._future: dict[str, list[np.ndarray]] = {n: [] for n in self.streams}
        self._pad: dict[str, list[np.ndarray]] = {n: [] for n in self.deltas}
        self._positions: list[int] = []

    def add(self, lowdim: bytes | memoryview, position: int) -> None:
        arrays = records.loads(lowdim, "a sample being packed")["arrays"]
        for name in self.streams:
            self._future[name].append(records.unpack_array(arrays[name]["future"]))
        for name in self.deltas:
            self._pad[name].append(records.unpack_array(arrays[name]["pad"]))
        self._positions.append(position)
        if len(self._positions) == CHUNK:
            self._flush()

    def part(self) -> StatsPart:
        self._flush()
        out = StatsPart()
        for key, m in self._moments.items():
            if m.mean is not None and m.m2 is not None and m.min is not None and m.max is not None:
                out.moments[key] = (m.n, m.mean, m.m2, m.min, m.max)
            out.sample[key] = self._sample[key]
        return out

    def _flush(self) -> None:
        """The samples since the last flush, a chunk at a time: current values and deltas."""
        n = len(self._positions)
        if not n:
            return
        sampled = np.asarray(self._positions) % self.stride == 0
        self._positions.clear()
        for name in self.streams:
            future = np.stack(self._future[name]).astype(np.float64)  # (samples, steps, *shape)
            self._future[name].clear()
            flat = future.reshape(n, future.shape[1], -1)  # (samples, steps, elements)
            self._take(name, flat[:, 0], flat[sampled, 0])
            if name in self.deltas:
                pad = np.stack(self._pad[name]).astype(bool)
                self._pad[name].clear()
                keep = ~pad[:, 1:]
                steps = flat[:, 1:] - flat[:, :1]
                self._take(name + DELTA, steps[keep], steps[sampled][keep[sampled]])

    def _take(self, key: str, rows: np.ndarray, sample: np.ndarray) -> None:
        self._moments[key].add(rows)
        if len(sample):
            self._sample[key].append(sample)



def merge(parts: Iterable[StatsPart], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, StreamStats]:
    """Each stream's (and each delta's) statistics, shaped as its values, from the shards' parts
    in shard order."""
    moments: dict[str, _Moments] = {}
    samples: dict[str, list[np.ndarray]] = {}
    for part in parts:
        for key, (n, mean, m2, lo, hi) in part.moments.items():
            moments.setdefault(key, _Moments()).merge(n, mean, m2, lo, hi)
        for key, rows in part.sample.items():
            samples.setdefault(key, []).extend(rows)
    out = {}
    for key, m in moments.items():
        if m.mean is None or m.m2 is None or m.min is None or m.max is None or not samples.get(key):
            continue  # a delta with every step padding: nothing to say
        shape = tuple(shapes[key.removesuffix(DELTA) if key.endswith(DELTA) else key])
        grid = np.percentile(np.concatenate(samples[key]), PERCENTILES, axis=0)
        out[key] = StreamStats(m.n, m.mean.reshape(shape), np.sqrt(m.m2 / m.n).reshape(shape),
                               m.min.reshape(shape), m.max.reshape(shape), grid.reshape((len(PERCENTILES), *shape)))
    return out
