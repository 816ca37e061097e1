"""The statistics of a pack (``rayform.pack.stats``), measured while its shards are written.

Each run's job measures its samples from the arrays it rendered (``RunStats``), and the
driver merges the runs' parts in run order (``merge``); runs are a pure function of the plan,
so the result does not depend on which process rendered which run, nor on how many there
were. Moments are reduced ``CHUNK`` rows at a time and merged chunk by chunk and run by run
in float64 (Chan et al.'s pairwise update); the quantile sample is the samples at every
``stride``-th position of the pack, so it is bounded however large the pack.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

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
    """One run's share of the statistics: per key its moments (n, mean, m2, min, max) and
    its rows of the pack's quantile sample."""

    moments: dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    sample: dict[str, list[np.ndarray]] = field(default_factory=dict)


def quantile_stride(total: int) -> int:
    """The pack's quantile sample: the samples at positions that are multiples of this."""
    return max(1, math.ceil(total / QUANTILE_SAMPLE))


class RunStats:
    """Feeds on a run's array values (``add``, piece by piece in rendering order) with their
    pack positions; ``part`` at the end. Moments are reduced ``CHUNK`` rows at a time over the
    whole run, so how the run was cut into pieces does not change a bit of the result."""

    def __init__(self, schema: Mapping[str, StreamSchema], stride: int):
        self.streams = [n for n, s in schema.items() if s.kind != "image"]
        self.deltas = [n for n in self.streams if schema[n].kind == "array"]
        self.stride = stride
        keys = self.streams + [n + DELTA for n in self.deltas]
        self._moments = {k: _Moments() for k in keys}
        self._sample: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        self._arrays: list[Mapping[str, tuple[np.ndarray, np.ndarray]]] = []
        self._positions: list[np.ndarray] = []

    def add(self, arrays: Mapping[str, tuple[np.ndarray, np.ndarray]], positions: np.ndarray) -> None:
        """``arrays``: per stream the future values ``(n, steps, *shape)`` and pad ``(n, steps)``."""
        self._arrays.append(arrays)
        self._positions.append(positions)

    def part(self) -> StatsPart:
        if self._positions:
            positions = np.concatenate(self._positions)
            for name in self.streams:
                values = np.concatenate([a[name][0] for a in self._arrays])
                pad = np.concatenate([a[name][1] for a in self._arrays]) if name in self.deltas else None
                for start in range(0, len(positions), CHUNK):
                    stop = min(len(positions), start + CHUNK)
                    self._reduce(name, values[start:stop], None if pad is None else pad[start:stop],
                                 positions[start:stop] % self.stride == 0)
        out = StatsPart()
        for key, m in self._moments.items():
            if m.mean is not None and m.m2 is not None and m.min is not None and m.max is not None:
                out.moments[key] = (m.n, m.mean, m.m2, m.min, m.max)
            out.sample[key] = self._sample[key]
        return out

    def _reduce(self, name: str, future: np.ndarray, pad: np.ndarray | None, sampled: np.ndarray) -> None:
        """A chunk of one stream's rows: current values and, with ``pad``, deltas."""
        flat = future.astype(np.float64).reshape(len(future), future.shape[1], -1)  # (samples, steps, elements)
        self._take(name, flat[:, 0], flat[sampled, 0])
        if pad is not None:
            keep = ~pad[:, 1:].astype(bool)
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
