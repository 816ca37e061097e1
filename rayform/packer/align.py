"""Time alignment: pure functions from native-rate streams to a fixed fps grid. No I/O.

The rules (DESIGN.md):

- the grid is ``t_k = t_0 + round(k * 1e9 / fps)`` over the time where every stream has data;
- an image is the latest frame at or before ``t_k``, never a future one, and is rejected
  (the instant dropped, and counted) when it is older than the tolerance;
- a timestamp within ``snap`` after an instant counts as at it (recorders stamp frames a few
  hundred ns off the grid their float seconds meant): for the frame chosen, for the range
  an array covers, and for the end a future window pads past. Never more than ``snap``;
- a sample's history and future are the grid's instants at ``k − j`` and ``k + j``
  (``pack.grid``), never offsets from ``t_k``;
- an instant within ``EXACT_NS`` of a recorded value takes that value exactly: grid instants are
  whole ns, so a grid whose step 0 is not a recording's may land 1 ns beside a step recorded at
  ``t_0 + round(k · 1e9 / fps)`` (3 Hz, 15 Hz), and an action chunk must be the recorded steps;
- otherwise an array is interpolated between its two recorded values around ``t_k``: linearly for
  floats, by slerp for the quaternion of a pose, by holding the earlier value for integer
  and bool data; it is rejected when those two values are further apart than twice the
  tolerance (a gap in the recording, not something to interpolate across).
"""

from __future__ import annotations

import numpy as np

from rayform.pack import grid as pack_grid
from rayform.recordings.streams import median_period

NS = pack_grid.NS
EXACT_NS = 2  # an instant this near a recorded value is at it (two roundings to whole ns apart)


def median_period_ns(ts: np.ndarray) -> int:
    """The typical spacing of a stream's timestamps (1 s for a single value)."""
    if len(ts) < 2:
        return NS
    return max(1, int(median_period(ts)))


def grid(start_ns: int, end_ns: int, fps: float) -> np.ndarray:
    """Instants ``start + round(k * 1e9 / fps)`` up to and including ``end``."""
    if end_ns < start_ns:
        return np.empty(0, np.int64)
    step = NS / fps
    span = end_ns - start_ns
    n = int(np.floor(span / step)) + 1
    while round(n * step) <= span:  # an instant that rounds onto the end belongs to the grid
        n += 1
    while n > 1 and round((n - 1) * step) > span:
        n -= 1
    return pack_grid.instants(start_ns, np.arange(n), fps)


def snap_ns(ts: np.ndarray, snap: float) -> int:
    """How far after an instant a timestamp of this stream still counts as at it."""
    return int(snap * median_period_ns(ts))


def latest_at_or_before(ts: np.ndarray, t: np.ndarray, snap: int = 0) -> np.ndarray:
    """Index of the last timestamp ``<= t + snap`` for each instant; -1 where there is none."""
    return np.searchsorted(ts, t + snap, side="right") - 1


def image_indices(ts: np.ndarray, t: np.ndarray, tolerance_ns: int, snap: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """For each instant: the frame to show, and whether it is fresh enough to use."""
    idx = latest_at_or_before(ts, t, snap)
    ok = idx >= 0
    age = t - ts[np.maximum(idx, 0)]
    ok &= age <= tolerance_ns
    return idx, ok


def bracket(ts: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Indices ``lo, hi`` of the values around each instant and the weight of ``hi``.

    Outside the recorded range both indices clamp to the nearest end (weight 0 or 1); within
    ``EXACT_NS`` of a recorded value the weight is exactly 0 or 1.
    """
    hi = np.clip(np.searchsorted(ts, t, side="left"), 0, len(ts) - 1)
    lo = np.clip(np.where(ts[hi] == t, hi, hi - 1), 0, len(ts) - 1)
    span = (ts[hi] - ts[lo]).astype(np.float64)
    w = np.divide((t - ts[lo]).astype(np.float64), span, out=np.zeros(len(t)), where=span > 0)
    w = np.where(t - ts[lo] <= EXACT_NS, 0.0, np.where(ts[hi] - t <= EXACT_NS, 1.0, w))
    return lo, hi, np.clip(w, 0.0, 1.0)


def array_ok(ts: np.ndarray, t: np.ndarray, tolerance_ns: int, snap: int = 0) -> np.ndarray:
    """Whether each instant lies inside the recording (``snap`` at either end) with no gap
    wider than 2×tolerance."""
    inside = (t >= ts[0] - snap) & (t <= ts[-1] + snap)
    lo, hi, _ = bracket(ts, t)
    result: np.ndarray = inside & ((ts[hi] - ts[lo]) <= 2 * tolerance_ns)
    return result


def interpolate(ts: np.ndarray, values: np.ndarray, t: np.ndarray, kind: str = "array") -> np.ndarray:
    """Values at instants ``t`` by the rule for the stream's dtype (``kind="pose"``: slerp)."""
    lo, hi, w = bracket(ts, t)
    if values.dtype.kind in "biu":
        return values[np.where(w >= 1.0, hi, lo)]
    shape = (len(t),) + (1,) * (values.ndim - 1)
    wb = w.reshape(shape)
    if kind == "pose":
        out = np.empty((len(t), 7), np.float64)
        out[:, :3] = values[lo, :3] * (1 - wb) + values[hi, :3] * wb
        out[:, 3:] = slerp(values[lo, 3:], values[hi, 3:], w)
        return out.astype(values.dtype, copy=False)
    with np.errstate(invalid="ignore"):  # a non-finite neighbour (kept at ingest where allowed) gives NaN
        out = values[lo].astype(np.float64) * (1 - wb) + values[hi].astype(np.float64) * wb
    if not np.isfinite(out).all():  # an instant on a recorded value is that value, whatever its neighbour
        out = np.where(wb == 0, values[lo], np.where(wb == 1, values[hi], out))
    result: np.ndarray = out.astype(values.dtype, copy=False)
    return result


def slerp(q0: np.ndarray, q1: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spherical linear interpolation of unit quaternions ``(N, 4)``, shortest path."""
    q0 = np.asarray(q0, np.float64)
    q1 = np.asarray(q1, np.float64)
    w = np.asarray(w, np.float64)[:, None]
    dot = np.sum(q0 * q1, axis=1, keepdims=True)
    q1 = np.where(dot < 0, -q1, q1)  # q and -q are one rotation: take the short way round
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin = np.sin(theta)
    near = sin < 1e-6
    safe = np.where(near, 1.0, sin)
    a = np.where(near, 1 - w, np.sin((1 - w) * theta) / safe)
    b = np.where(near, w, np.sin(w * theta) / safe)
    out = a * q0 + b * q1
    result: np.ndarray = out / np.linalg.norm(out, axis=1, keepdims=True)
    return result


def future_window(
    ts: np.ndarray, values: np.ndarray, when: np.ndarray, end_ns: int, kind: str = "array", snap: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Values at the instants ``when`` (each sample's row: ``PackSpec.future_instants``) and
    where each ran past ``end_ns`` (by more than ``snap``).

    Returns ``(*when.shape, *shape)`` values and a ``when.shape`` bool pad mask. Past the end
    the last value inside is held.
    """
    pad = when > end_ns + snap
    when = np.minimum(when, end_ns)  # held: the value at the end, for every padded step
    flat = interpolate(ts, values, when.reshape(-1), kind)
    return flat.reshape(*when.shape, *values.shape[1:]), pad
