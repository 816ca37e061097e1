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
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from rayform.pack.layout import StreamSchema
from rayform.pack.stats import PERCENTILES, QUANTILE_SAMPLE, StreamStats, delta_key, stream_of

CHUNK = 1 << 14  # rows merged into the moments at a time


class _Moments:
    """Per element: how many finite values, their mean, sum of squared deviations, min and max.
    Values that are not finite (kept at ingest only when allowed) are left out and counted."""

    def __init__(self) -> None:
        self.rows = 0
        self.n: np.ndarray | None = None
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None
        self.min: np.ndarray | None = None
        self.max: np.ndarray | None = None

    def add(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        finite = np.isfinite(rows)
        if finite.all():
            mean = rows.mean(axis=0)
            n = np.full(mean.shape, len(rows), np.int64)
            self.merge(len(rows), n, mean, ((rows - mean) ** 2).sum(axis=0), rows.min(axis=0), rows.max(axis=0))
            return
        n = finite.sum(axis=0)
        kept = np.where(finite, rows, 0.0)
        mean = kept.sum(axis=0) / np.maximum(n, 1)
        m2 = np.where(finite, (rows - mean) ** 2, 0.0).sum(axis=0)
        lo = np.where(finite, rows, np.inf).min(axis=0)
        hi = np.where(finite, rows, -np.inf).max(axis=0)
        self.merge(len(rows), n, mean, m2, lo, hi)

    def merge(self, rows: int, nb: np.ndarray, mean_b: np.ndarray, m2_b: np.ndarray, min_b: np.ndarray,
              max_b: np.ndarray) -> None:
        self.rows += rows
        if self.n is None or self.mean is None or self.m2 is None or self.min is None or self.max is None:
            self.n, self.mean, self.m2, self.min, self.max = nb, mean_b, m2_b, min_b, max_b
            return
        n = self.n + nb
        whole = np.maximum(n, 1)  # an element with no finite value yet: 0 of 0
        delta = mean_b - self.mean
        self.mean = self.mean + delta * (nb / whole)
        self.m2 = self.m2 + m2_b + delta**2 * (self.n * nb / whole)
        self.min, self.max, self.n = np.minimum(self.min, min_b), np.maximum(self.max, max_b), n


@dataclass
class StatsPart:
    """One run's share of the statistics: per key its moments (n, mean, m2, min, max) and
    its rows of the pack's quantile sample."""

    moments: dict[str, tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)
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
        keys = self.streams + [delta_key(n) for n in self.deltas]
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
            if m.n is not None and m.mean is not None and m.m2 is not None and m.min is not None and m.max is not None:
                out.moments[key] = (m.rows, m.n, m.mean, m.m2, m.min, m.max)
            out.sample[key] = self._sample[key]
        return out

    def _reduce(self, name: str, future: np.ndarray, pad: np.ndarray | None, sampled: np.ndarray) -> None:
        """A chunk of one stream's rows: current values and, with ``pad``, deltas."""
        flat = future.astype(np.float64).reshape(len(future), future.shape[1], -1)  # (samples, steps, elements)
        self._take(name, flat[:, 0], flat[sampled, 0])
        if pad is not None:
            keep = ~pad[:, 1:].astype(bool)
            with np.errstate(invalid="ignore"):  # inf − inf: a NaN, left out as any non-finite value
                steps = flat[:, 1:] - flat[:, :1]
            self._take(delta_key(name), steps[keep], steps[sampled][keep[sampled]])

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
        for key, (rows, n, mean, m2, lo, hi) in part.moments.items():
            moments.setdefault(key, _Moments()).merge(rows, n, mean, m2, lo, hi)
        for key, found in part.sample.items():
            samples.setdefault(key, []).extend(found)
    out = {}
    for key, m in moments.items():
        if m.n is None or m.mean is None or m.m2 is None or m.min is None or m.max is None or not samples.get(key):
            continue  # a delta with every step padding: nothing to say
        shape = tuple(shapes[stream_of(key)])
        some = m.n > 0  # an element with no finite value says 0 for every statistic
        sample = np.concatenate(samples[key])
        grid = _percentiles(sample) if some.all() else np.where(some, _percentiles(sample), 0.0)
        std = np.sqrt(m.m2 / np.maximum(m.n, 1))
        out[key] = StreamStats(m.rows, np.where(some, m.mean, 0.0).reshape(shape), np.where(some, std, 0.0).reshape(shape),
                               np.where(some, m.min, 0.0).reshape(shape), np.where(some, m.max, 0.0).reshape(shape),
                               grid.reshape((len(PERCENTILES), *shape)), int(m.rows * m.n.size - m.n.sum()))
    return out


def _percentiles(sample: np.ndarray) -> np.ndarray:
    if np.isfinite(sample).all():
        grid: np.ndarray = np.percentile(sample, PERCENTILES, axis=0)
        return grid
    with warnings.catch_warnings():  # an element with no finite value: its column is NaN, then 0
        warnings.simplefilter("ignore", RuntimeWarning)
        found: np.ndarray = np.nanpercentile(np.where(np.isfinite(sample), sample, np.nan), PERCENTILES, axis=0)
    return found
