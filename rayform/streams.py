"""Streams: the named, timestamped series a segment is made of.

Three kinds, given to ``client.segments.add``:

- :class:`ImageStream`: frames as encoded JPEG/PNG bytes (kept as recorded) or as a raw
  array ``(N, H, W[, C])`` (e.g. 16-bit depth, kept losslessly).
- :class:`ArrayStream`: ``(N, *shape)`` values of one dtype, with units and optional names.
- :class:`PoseStream`: ``(N, 7)`` values ``x, y, z, qx, qy, qz, qw`` (position, then a unit
  quaternion in ROS order), with the coordinate frame convention they were recorded in.

Timestamps are int64 nanoseconds, non-decreasing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayform.errors import InvalidInput

FRAMES = ("ros", "optical", "opengl")
RESERVED = {"action", "action_is_pad", "t_ns", "meta", "lowdim"}
_NAME = re.compile(r"^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*$")


def check_stream_name(name: str) -> str:
    # Dots are refused because a stream becomes a tar member extension (cam0/rgb -> cam0.rgb.jpg).
    if not isinstance(name, str) or not _NAME.match(name) or name in RESERVED:
        raise InvalidInput(
            f"stream name {name!r}: use letters, digits, '_', '-' and '/' (no dots), "
            f"and none of {sorted(RESERVED)}"
        )
    return name


def check_timestamps(name: str, timestamps: Any, count: int) -> np.ndarray:
    ts = np.asarray(timestamps)
    if ts.dtype.kind not in "iu":
        raise InvalidInput(f"stream {name}: timestamps must be int64 nanoseconds, got {ts.dtype}")
    ts = ts.astype(np.int64, copy=False)
    if ts.ndim != 1 or len(ts) != count:
        raise InvalidInput(f"stream {name}: {len(ts)} timestamps for {count} values")
    if count == 0:
        raise InvalidInput(f"stream {name}: no values")
    back = np.flatnonzero(np.diff(ts) < 0)
    if len(back):
        i = int(back[0]) + 1
        raise InvalidInput(f"stream {name}: timestamp {i} ({ts[i]}) is before timestamp {i - 1} ({ts[i - 1]})")
    return ts


@dataclass(frozen=True)
class ImageStream:
    name: str
    timestamps: Any
    frames: Sequence[bytes] | np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ArrayStream:
    name: str
    timestamps: Any
    values: Any
    units: str | None = None
    names: Sequence[str] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PoseStream:
    name: str
    timestamps: Any
    values: Any
    frame: str = "ros"
    units: str = "m"
    meta: Mapping[str, Any] = field(default_factory=dict)


Stream = ImageStream | ArrayStream | PoseStream


@dataclass(frozen=True)
class StreamInfo:
    """A stream as a segment manifest records it (no data, only what names the data)."""

    name: str
    kind: str  # "image" | "array" | "pose"
    count: int
    dtype: str
    shape: tuple[int, ...]
    timestamps: str  # blob holding the int64 timestamps
    data: tuple[tuple[str, int], ...]  # (blob, frames in it); one blob for arrays
    encoding: str | None = None  # images: "jpeg" | "png" | "raw"
    sizes: str | None = None  # encoded images: blob of per-frame byte sizes
    units: str | None = None
    names: tuple[str, ...] | None = None
    frame: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_image(self) -> bool:
        return self.kind == "image"

    def to_manifest(self) -> dict[str, Any]:
        out = {
            "kind": self.kind,
            "count": self.count,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "timestamps": self.timestamps,
            "data": [list(d) for d in self.data],
            "meta": dict(self.meta),
        }
        for key in ("encoding", "sizes", "units", "frame"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.names is not None:
            out["names"] = list(self.names)
        return out

    @classmethod
    def from_manifest(cls, name: str, m: Mapping[str, Any]) -> StreamInfo:
        return cls(
            name=name,
            kind=m["kind"],
            count=int(m["count"]),
            dtype=m["dtype"],
            shape=tuple(m["shape"]),
            timestamps=m["timestamps"],
            data=tuple((d[0], int(d[1])) for d in m["data"]),
            encoding=m.get("encoding"),
            sizes=m.get("sizes"),
            units=m.get("units"),
            names=tuple(m["names"]) if m.get("names") is not None else None,
            frame=m.get("frame"),
            meta=m.get("meta", {}),
        )

    def describe(self) -> str:
        shape = "×".join(map(str, self.shape)) or "scalar"
        extra = self.encoding or self.units or ""
        if self.frame:
            extra = f"{extra}, frame={self.frame}"
        return f"{self.kind:5} {shape:>11} {self.dtype:7} {extra}".rstrip()
