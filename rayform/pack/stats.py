"""Normalization statistics of a pack's array streams: what every normalizer reads.

Per array stream and per element: ``count``, ``mean``, ``std`` (exact: float64 sums merged
chunk by chunk in the pack's fixed order, so 1 or 16 pack processes give the same bytes),
``min``, ``max``, and ``q01``/``q99`` read off a grid of ``PERCENTILES`` (dense in the tails,
where normalizers look) computed exactly on a bounded, evenly spaced sample of the pack
(``QUANTILE_SAMPLE`` samples; an interleaved pack's order is a uniform one). ``<stream>:delta`` holds the same for
``x(t+k) − x(t)``, ``k = 1 … max_horizon``, over the steps that are not padding: a key of its own
(``delta_key``), as ``:`` is in no stream's name, so a recorded ``x_delta`` (RT-1's
``action/rotation_delta``) keeps its own statistics beside the derived delta of ``x``.

Stats of several packs (a mixture, weighted by the samples each gives) merge exactly for
count, mean, std, min and max; their percentiles invert the mixture of the parts'
distributions, each read as linear between its grid points (within about a percent of rank
of the exact ones in the tails).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform.errors import Malformed

PERCENTILES = np.array([0, 0.5, 1, 1.5, 2, 3, 5, 10, 25, 50, 75, 90, 95, 97, 98, 98.5, 99, 99.5, 100])
_Q01, _Q99 = int(np.flatnonzero(PERCENTILES == 1)[0]), int(np.flatnonzero(PERCENTILES == 99)[0])
QUANTILE_SAMPLE = 100_000
KEYS = ("count", "mean", "std", "min", "max", "q01", "q99", "nonfinite")
DELTA_KEY = ":delta"  # the derived delta's statistics: x(t+k) − x(t) of stream x
_OLD_DELTA = "_delta"  # how packs made before wave 5 keyed them


def delta_key(stream: str) -> str:
    """The key of ``stream``'s derived delta in a pack's statistics."""
    return stream + DELTA_KEY


def stream_of(key: str) -> str:
    """The stream whose values a statistics key describes (itself, or the one it is the delta of)."""
    return key.removesuffix(DELTA_KEY)


@dataclass(frozen=True)
class StreamStats:
    """One stream's statistics; every array has the stream's element shape, ``percentiles``
    one more leading axis, one per ``PERCENTILES``."""

    count: int
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    percentiles: np.ndarray
    # values left out for not being finite (NaN, ±inf: kept at ingest only when allowed); an
    # element with no finite value at all gets 0 for every statistic
    nonfinite: int = 0

    @property
    def q01(self) -> np.ndarray:
        return np.asarray(self.percentiles[_Q01])

    @property
    def q99(self) -> np.ndarray:
        return np.asarray(self.percentiles[_Q99])

    def as_dict(self) -> dict[str, Any]:
        """``{"count", "mean", "std", "min", "max", "q01", "q99"}`` as numpy values."""
        return {"count": self.count, "mean": self.mean, "std": self.std, "min": self.min, "max": self.max,
                "q01": self.q01, "q99": self.q99, "nonfinite": self.nonfinite}

    def to_manifest(self) -> dict[str, Any]:
        return {"count": self.count, "shape": list(self.mean.shape), "mean": self.mean.ravel().tolist(),
                "std": self.std.ravel().tolist(), "min": self.min.ravel().tolist(), "max": self.max.ravel().tolist(),
                "percentiles": self.percentiles.reshape(len(PERCENTILES), -1).tolist(),
                **({"nonfinite": self.nonfinite} if self.nonfinite else {})}

    @classmethod
    def from_manifest(cls, doc: Any, what: str) -> StreamStats:
        if not isinstance(doc, Mapping):
            raise Malformed(f"{what}: not a mapping")
        count, shape = doc.get("count"), doc.get("shape")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < 1 << 62:
            raise Malformed(f"{what}: count {str(count)[:20]} is not a positive whole number")
        if not isinstance(shape, list) or len(shape) > 8 or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1 << 16 for n in shape):
            raise Malformed(f"{what}: shape {str(shape)[:40]} is not a list of sizes")
        size = math.prod(shape)
        if size > 1 << 16:
            raise Malformed(f"{what}: {size} elements, more than a stream's statistics hold")

        def values(key: str, rows: int | None = None) -> np.ndarray:
            got = doc.get(key)
            try:
                array = np.asarray(got, np.float64)
            except (TypeError, ValueError):
                raise Malformed(f"{what}: {key} is not a list of numbers") from None
            want = (size,) if rows is None else (rows, size)
            if array.shape != want or not np.all(np.isfinite(array)):
                raise Malformed(f"{what}: {key} is {array.shape}, not {want} finite numbers")
            return array.reshape(tuple(shape) if rows is None else (rows, *shape))

        nonfinite = doc.get("nonfinite", 0)
        if isinstance(nonfinite, bool) or not isinstance(nonfinite, int) or not 0 <= nonfinite < 1 << 62:
            raise Malformed(f"{what}: nonfinite {str(nonfinite)[:20]} is not a count")
        return cls(count, values("mean"), values("std"), values("min"), values("max"),
                   values("percentiles", len(PERCENTILES)), nonfinite)


def of_values(values: np.ndarray, sample: np.ndarray | None = None) -> StreamStats:
    """The statistics of ``values`` ``(N, *shape)``; percentiles of ``sample`` (default: all)."""
    v = np.asarray(values, np.float64)
    q = np.asarray(sample if sample is not None else v, np.float64)
    return StreamStats(len(v), v.mean(axis=0), v.std(axis=0), v.min(axis=0), v.max(axis=0),
                       np.percentile(q, PERCENTILES, axis=0))


def merge(parts: Sequence[StreamStats]) -> StreamStats:
    """The statistics of the parts' samples together (see the module's note on percentiles)."""
    if len(parts) == 1:
        return parts[0]
    counts = np.array([p.count for p in parts], np.float64)
    total = counts.sum()
    w = (counts / total).reshape((-1,) + (1,) * parts[0].mean.ndim)
    means = np.stack([p.mean for p in parts])
    mean = (w * means).sum(axis=0)
    second = (w * (np.stack([p.std for p in parts]) ** 2 + (means - mean) ** 2)).sum(axis=0)
    grids = np.stack([p.percentiles.reshape(len(PERCENTILES), -1) for p in parts])  # (parts, P, elements)
    share = counts / total
    levels = PERCENTILES / 100
    out = np.empty(grids.shape[1:])
    for e in range(grids.shape[2]):
        values = np.unique(grids[:, :, e])
        # the mixture's distribution at every grid value, each part's linear between its points
        cdf = sum(w * np.interp(values, g[:, e], levels, left=0.0, right=1.0) for w, g in zip(share, grids))
        out[:, e] = np.interp(levels, np.maximum.accumulate(cdf), values)
    percentiles = out.reshape(parts[0].percentiles.shape)
    percentiles[0] = np.min([p.min for p in parts], axis=0)
    percentiles[-1] = np.max([p.max for p in parts], axis=0)
    return StreamStats(int(total), mean, np.sqrt(np.maximum(second, 0)), np.min([p.min for p in parts], axis=0),
                       np.max([p.max for p in parts], axis=0), percentiles, sum(p.nonfinite for p in parts))


def concatenate(parts: Sequence[StreamStats]) -> StreamStats:
    """The statistics of values made by concatenating the parts' (flattened) elements."""
    def cat(key: str) -> np.ndarray:
        return np.concatenate([np.asarray(getattr(p, key)).ravel() for p in parts])

    grid = np.concatenate([p.percentiles.reshape(len(PERCENTILES), -1) for p in parts], axis=1)
    return StreamStats(min(p.count for p in parts), cat("mean"), cat("std"), cat("min"), cat("max"), grid,
                       sum(p.nonfinite for p in parts))


def stats_of(manifest: Mapping[str, Any], what: str, streams: Collection[str] = ()) -> dict[str, StreamStats] | None:
    """A pack manifest's statistics, checked; None for a pack made before they were kept. A pack
    made before deltas had keys of their own (``delta_key``) keyed them ``<stream>_delta``: read
    as ``<stream>:delta`` where ``<stream>`` is one of its ``streams`` and ``<stream>_delta`` is not
    (such a pack could not hold both)."""
    doc = manifest.get("stats")
    if doc is None:
        return None
    if not isinstance(doc, Mapping) or len(doc) > 4096:
        raise Malformed(f"{what}: stats is not a mapping of streams")
    out = {}
    for name, s in doc.items():
        key = str(name)
        if DELTA_KEY not in key and key not in streams and key.removesuffix(_OLD_DELTA) in streams:
            key = delta_key(key.removesuffix(_OLD_DELTA))
        out[key] = StreamStats.from_manifest(s, f"{what}: stats of {str(name)[:80]}")
    return out
