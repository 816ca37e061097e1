"""A sample's action: one stream's future, or several concatenated on the last axis.

A part of ``action`` is:

- an array stream ``x``: its next ``horizon`` values ``x(t+k/fps)``, ``k = 1 … horizon``;
- ``x:delta`` (or ``x_delta`` where no stream is recorded under that name): those minus the
  current value ``x(t)``. A recorded name always means the recorded stream: RT-1's
  ``action/rotation_delta`` is its own values, and its derived delta is
  ``action/rotation_delta:delta`` (``:`` is in no stream's name, so the two never meet);
- a pose stream ``p``: its next poses, position then rotation, the rotation as recorded
  (x, y, z, w) or as the sample's ``rotation`` asks (``"quat"`` with w ≥ 0, ``"rot6d"``,
  ``"axis_angle"``);
- ``p:delta`` (``p_delta``): the relative transform ``T(t)⁻¹ · T(t+k)`` in the sample's ``frame``: the
  position moved, in the axes of the pose at ``t``, and the rotation from it (not a
  component-wise difference).

One part keeps its shape: ``(horizon, *shape)``. Several are flattened and concatenated,
``(horizon, Σ widths)``, their names element by element in ``names`` (e.g.
``joints/position_delta[shoulder]``); a step is padding if it is for any part.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from rayform.errors import InvalidInput, StreamNotFound
from rayform.frames import ROTATIONS, relative_poses, represent
from rayform.pack.layout import StreamSchema
from rayform.pack.stats import DELTA_KEY, delta_key, stream_of

DELTA = "_delta"  # the short spelling of a derived delta, where no stream is recorded under it
_ROTATION_NAMES = {"quat": ["qx", "qy", "qz", "qw"], "rot6d": ["r11", "r21", "r31", "r12", "r22", "r32"],
                   "axis_angle": ["rx", "ry", "rz"]}


def resolve(asked: str, recorded: Collection[str]) -> tuple[str, bool]:
    """The stream an action part reads and whether it is that stream's derived delta."""
    if asked.endswith(DELTA_KEY):
        return stream_of(asked), True
    if asked in recorded or not asked.endswith(DELTA):
        return asked, False
    return asked.removesuffix(DELTA), True


@dataclass(frozen=True)
class ActionPart:
    """One named part of the action: its stream's schema and whether it is its derived delta."""

    asked: str
    stream: StreamSchema
    delta: bool

    @classmethod
    def of(cls, schema: Mapping[str, StreamSchema], asked: str) -> ActionPart:
        base, delta = resolve(asked, schema)
        if base not in schema:
            raise StreamNotFound(f"action {asked!r}: no stream {base!r}. It has: {', '.join(sorted(schema))}")
        s = schema[base]
        if s.kind == "image":
            raise InvalidInput(f"action {asked!r}: {base} is an image stream; an action must be an array or pose stream")
        return cls(asked, s, delta)

    @property
    def stats_key(self) -> str:
        """Its key in a pack's statistics: the stream's, or its derived delta's."""
        return delta_key(self.stream.name) if self.delta else self.stream.name

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
