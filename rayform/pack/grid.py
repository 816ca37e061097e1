"""A pack's clock: the one formula of every instant a pack holds.

A segment's samples are the instants ``origin + round(k · 1e9 / fps)`` of its grid (``k`` the
grid step, ``origin`` the instant of step 0); a sample's history is the same grid at ``k − j``
and its future (an action chunk) at ``k + j``. Computing each from the grid step, never as an
offset from a sample's own (rounded) instant, keeps the three on one grid to the nanosecond:
``t_k − round(j · 1e9 / fps)`` lands a nanosecond beside step ``k − j`` at 3, 15 or 29.97 fps.
"""

from __future__ import annotations

import numpy as np

NS = 1_000_000_000


def instants(origin: int, steps: np.ndarray | int, fps: float) -> np.ndarray:
    """The grid's instants (int64 ns) at ``steps`` (any shape; negative: before step 0)."""
    return origin + np.round(np.asarray(steps, np.int64) * (NS / fps)).astype(np.int64)


def origin(t: int, step: int, fps: float) -> int:
    """The instant of step 0 of the grid on which step ``step`` is at ``t``."""
    return int(t) - int(np.round(int(step) * (NS / fps)))


def around(steps: np.ndarray, first: int, last: int) -> np.ndarray:
    """``(len(steps), last − first + 1)``: each step's neighbours ``k + first … k + last``."""
    return np.asarray(steps, np.int64)[:, None] + np.arange(first, last + 1, dtype=np.int64)[None, :]
