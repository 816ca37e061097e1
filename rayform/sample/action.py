"""A sample's action: one stream's future, or several concatenated on the last axis.

A part of ``action`` is:

- an array stream ``x``: its next ``horizon`` values ``x(t+k/fps)``, ``k = 1 … horizon``;
- ``x_delta``: those minus the current value ``x(t)``;
- a pose stream ``p``: its next poses, position then rotation, the rotation as recorded
  (x, y, z, w) or as the sample's ``rotation`` asks (``"quat"`` with w ≥ 0, ``"rot6d"``,
  ``"axis_angle"``);
- ``p_delta``: the relative transform ``T(t)⁻¹ · T(t+k)`` in the sample's ``frame``: the
  position moved, in the axes of the pose at ``t``, and the rotation from it (not a
  component-wise difference).

One part keeps its shape: ``(horizon, *shape)``. Several are flattened and concatenated,
``(horizon, Σ widths)``, their names element by element in ``names`` (e.g.
``joints/position_delta[shoulder]``); a step is padding if it is for any part.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rayform.errors import InvalidInput, StreamNotFound
from rayform.frames import ROTATIONS, relative_poses, represent
from rayform.pack.layout import StreamSchema

DELTA = "_delta"
_ROTATION_NAMES = {"quat": ["qx", "qy", "qz", "qw"], "rot6d": ["r11", "r21", "r31", "r12", "r22", "r32"],
                   "axis_angle": ["rx", "ry", "rz"]}


@dataclass(frozen=True)
class ActionPart:
    """One named part of the action: its stream's schema and whether it is a ``_delta``."""

    asked: str
    stream: StreamSchema
    delta: bool

    @classmethod
    def of(cls, schema: Mapping[str, StreamSchema], asked: str) -> ActionPart:
        delta = asked.endswith(DELTA) and asked not in schema
        base = asked.removesuffix(DELTA) if delta else asked
        if base not in schema:
            raise StreamNotFound(f"action {asked!r}: no stream {base!r}. It has: {', '.join(sorted(schema))}")
        s = schema[base]
        if s.kind == "image":
            raise InvalidInput(f"action {asked!r}: {base} is an image stream; an action must be an array or pose stream")
        return cls(asked, s, delta)

    def width(self, rotation: str | None) -> int:
        if self.stream.kind == "pose":
            return 3 + (ROTATIONS[rotation] if rotation else 4)
        return math.prod(self.stream.shape)

    def names(self, rotation: str | None) -> list[str]:
        if self.stream.kind == "pose":
            elements = ["x", "y", "z", *_ROTATION_NAMES[rotation or "quat"]]
        elif self.stream.names and len(self.stream.names) == self.width(rotation):
            elements = list(self.stream.names)
        else:
            elements = [str(i) for i in range(self.width(rotation))]
        return [f"{self.asked}[{e}]" for e in elements]

    def values(self, future: np.ndarray, horizon: int, rotation: str | None) -> np.ndarray:
        """``(n, horizon, ...)`` from ``n`` samples' windows of the stream, ``future``
        ``(n, horizon + 1, *shape)`` (in frame)."""
        if self.stream.kind == "pose":
            poses = relative_poses(future.astype(np.float64)) if self.delta else future.astype(np.float64)
            steps = poses[:, 1:horizon + 1]
            if rotation is None:
                return steps
            return np.concatenate([steps[..., :3], represent(steps[..., 3:], rotation)], axis=-1)
        steps = future[:, 1:horizon + 1] - future[:, :1] if self.delta else future[:, 1:horizon + 1]
        return np.asarray(steps)


def check_rotation(rotation: str | None) -> str | None:
    if rotation is not None and rotation not in ROTATIONS:
        raise InvalidInput(f"rotation {str(rotation)[:40]!r}: one of {', '.join(ROTATIONS)}, or None (as recorded)")
    return rotation
