"""Observation history: which past grid steps a sample carries of a stream.

Asked as ``history={"cam0/rgb": 2}`` (the last 2 grid steps, present included) or
LeRobot's way, ``{"cam0/rgb": [-0.1, 0.0]}`` (seconds, snapped to the grid: each must lie
within 1% of a step of one, at or before the present). Either becomes the steps back of
each value, in the order they come out: ``(1, 0)`` for the two examples at 10 fps. A stream
with history comes out with a leading time axis, and ``<stream>_is_pad`` marks the steps
before its segment's first sample (which repeat that sample's values, as LeRobot does).
Packs carry it (``PackSpec.max_history``): nothing is read outside the sample.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

from rayform.errors import InvalidInput
from rayform.pack.spec import MAX_HORIZON

PAD = "_is_pad"


def steps_back(history: Mapping[str, int | Sequence[float]] | None, fps: float) -> dict[str, tuple[int, ...]]:
    """Each stream's steps back, from a count or from offsets in seconds."""
    if history is None:
        return {}
    if not isinstance(history, Mapping):
        raise InvalidInput(f"history {str(history)[:60]!r}: a mapping of streams, e.g. {{\"cam0/rgb\": 2}}")
    out = {}
    for name, asked in history.items():
        what = f"history of {str(name)[:80]!r}"
        if isinstance(asked, numbers.Integral) and not isinstance(asked, bool):
            n = int(asked)
            if not 1 <= n <= MAX_HORIZON + 1:
                raise InvalidInput(f"{what}: {n} steps, 1..{MAX_HORIZON + 1} (the present included)")
            out[name] = tuple(range(n - 1, -1, -1))
            continue
        if isinstance(asked, (str, bytes)) or not isinstance(asked, Sequence) or not asked:
            raise InvalidInput(f"{what}: a number of steps, or offsets in seconds such as [-0.1, 0.0]")
        steps = []
        for dt in asked:
            if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not math.isfinite(dt):
                raise InvalidInput(f"{what}: {str(dt)[:20]} is not a number of seconds")
            k = -dt * fps
            if abs(k - round(k)) > 0.01 or round(k) < 0 or round(k) > MAX_HORIZON:
                raise InvalidInput(f"{what}: {dt:g} s is not a grid step at or before the present at {fps:g} fps "
                                   f"(steps are {1 / fps:g} s); the future is the action's, through horizon")
            steps.append(int(round(k)))
        out[name] = tuple(steps)
    return out
