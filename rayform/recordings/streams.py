"""Streams: the named, timestamped series a segment is made of.

The kinds given to ``client.segments.add``:

- :class:`ImageStream`: frames as encoded JPEG/PNG bytes (kept as recorded) or as a raw
  array ``(N, H, W[, C])`` (e.g. 16-bit depth, kept losslessly).
- :class:`VideoStream`: a camera's encoded video as recorded (AV1, H.264, HEVC packets, their
  times and keyframes), kept packet for packet: an image stream whose frames are decoded
  when they are read (``encoding == "video"``).
- :class:`ArrayStream`: ``(N, *shape)`` values of one dtype, with units and optional names.
- :class:`PoseStream`: ``(N, 7)`` values ``x, y, z, qx, qy, qz, qw`` (position, then a unit
  quaternion in ROS order), with the coordinate frame convention they were recorded in.

Timestamps are int64 nanoseconds, non-decreasing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayform import names
from rayform.codec.codecs import VIDEO_CODECS
from rayform.errors import InvalidInput, Malformed
from rayform.frames import FRAMES
from rayform.untrusted import array_list, integer, mapping, parsing, string
from rayform.untrusted import dtype as checked_dtype
from rayform.untrusted import shape as checked_shape

KINDS = ("image", "array", "pose")
MAX_COUNT = 1 << 40
RESERVED = {"action", "action_is_pad", "t_ns", "meta", "lowdim"}
_NAME = re.compile(r"^[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+)*$")


def task_of(meta: Mapping[str, Any]) -> str:
    """A segment's task or language instruction: ``meta["task"]``, else its ``meta["tasks"]``
    joined by "; " (LeRobot's episode tasks), else ""."""
    task = meta.get("task")
    if isinstance(task, str):
        return task
    tasks = meta.get("tasks")
    if isinstance(tasks, list) and all(isinstance(t, str) for t in tasks):
        return "; ".join(tasks)
    return ""


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


def median_period(timestamps: np.ndarray) -> float:
    """``np.median(np.diff(timestamps))``, the typical spacing of a stream (0 for a single
    timestamp); a short stream's by sorting a list, as numpy's median costs ~40 µs whatever
    the size and an ingest of a million short episodes takes one per stream."""
    if len(timestamps) < 2:
        return 0.0
    if len(timestamps) > 256:
        return float(np.median(np.diff(timestamps)))
    d = sorted(np.diff(timestamps).tolist())
    return float((d[(len(d) - 1) // 2] + d[len(d) // 2]) / 2)


def stored_stream(name: Any, entry: Any, what: str) -> tuple[str, str]:
    """``(what, kind)`` of a stream entry in a stored manifest, its name and kind checked."""
    what = f"{what}, stream {str(name)[:80]!r}"
    try:
        check_stream_name(name)
    except InvalidInput:
        raise Malformed(f"{what}: not a stream name") from None
    kind = mapping(entry, what).get("kind")
    if kind not in KINDS:
        raise Malformed(f"{what}: kind {str(kind)[:20]!r} is not one of {KINDS}")
    return what, kind


@dataclass(frozen=True)
class ImageStream:
    name: str
    timestamps: Any
    frames: Sequence[bytes] | np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ArrayStream:
    """An array per timestamp (joints, forces, actions). ``limits``: ``(low, high)``, the range
    the values are declared to stay in (numbers, or one a column; a joint's limits, an action's
    bounds): health's ``out_of_range`` counts the samples outside it. Kept in the manifest as the
    stream's ``meta["limits"]``."""

    name: str
    timestamps: Any
    values: Any
    units: str | None = None
    names: Sequence[str] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    limits: tuple[Any, Any] | None = None


@dataclass(frozen=True)
class PoseStream:
    name: str
    timestamps: Any
    values: Any
    frame: str = "ros"
    units: str = "m"
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VideoStream:
    """A camera's encoded video, as recorded: ``packets`` in decode order, each one's
    presentation time in ns (``packet_times``) and whether it is a keyframe (``keyframes``);
    ``codec`` (``"av1"``, ``"h264"``, ``"hevc"``), the frames' ``width`` and ``height``, and the
    codec's ``extradata`` where the container keeps it apart (H.264's avcC, say). The segment's
    frames are ``timestamps``: each one packet's time. Packets timed before the first frame are
    a lead-in that only decodes (a segment cut from a longer video starts at a keyframe at or
    before its first frame), and, where packets are reordered, packets timed after the last a
    lead-out; the first packet must be a keyframe."""

    name: str
    timestamps: Any
    packets: Sequence[bytes | memoryview]
    packet_times: Any
    keyframes: Any
    codec: str
    width: int
    height: int
    extradata: bytes = b""
    meta: Mapping[str, Any] = field(default_factory=dict)


Stream = ImageStream | ArrayStream | PoseStream | VideoStream


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
    encoding: str | None = None  # images: "jpeg" | "png" | "mixed" (each frame one of them) | "raw" | "video"
    sizes: str | None = None  # encoded images: blob of per-frame (video: per-packet) byte sizes
    units: str | None = None
    names: tuple[str, ...] | None = None
    frame: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    video: VideoInfo | None = None  # encoding "video": the codec, and the blob of its packets' times

    @property
    def is_image(self) -> bool:
        return self.kind == "image"

    @property
    def is_video(self) -> bool:
        return self.encoding == "video"

    def blobs(self) -> Iterator[tuple[str, str]]:
        """``(blob, role)`` for every blob this stream names: the one place that says which
        fields of a stream entry are blobs (``ops.references`` walks stores through it; a
        test stores every kind of stream and checks that what was written is what this names)."""
        yield self.timestamps, "timestamps"
        for i, (blob, _) in enumerate(self.data):
            yield blob, "data" if len(self.data) == 1 else f"data {i}"
        if self.sizes is not None:
            yield self.sizes, "frame sizes"
        if self.video is not None:
            yield self.video.index, "packet index"

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
        if self.video is not None:
            out["video"] = self.video.to_manifest()
        return out

    @classmethod
    def from_manifest(cls, name: str, m: Mapping[str, Any], what: str = "segment manifest") -> StreamInfo:
        """A stream entry of a stored segment manifest, every field checked (it is untrusted)."""
        what, kind = stored_stream(name, m, what)
        count = integer(m, "count", what, 1, MAX_COUNT)
        dt = checked_dtype(m.get("dtype"), what, "biuf")
        data = []
        for d in array_list(m, "data", what):
            with parsing(what):
                blob, n = d
            data.append((names.digest(blob, f"{what}: data blob"), integer({"n": n}, "n", what, 1, MAX_COUNT)))
        encoding = string(m, "encoding", what, optional=True)
        held = sum(n for _, n in data)
        if not data or (held != count and encoding != "video") or (kind != "image" and len(data) != 1):
            raise Malformed(f"{what}: its data blobs hold {held} values, it claims {count}")
        sizes = m.get("sizes")
        video = None
        if kind == "image":
            if encoding not in ("jpeg", "png", "mixed", "raw", "video"):
                raise Malformed(f"{what}: image encoding {str(encoding)[:20]!r} is not jpeg, png, mixed, raw or video")
            if (encoding == "raw") != (sizes is None):
                raise Malformed(f"{what}: {'raw frames have no' if encoding == 'raw' else 'encoded frames need'} sizes")
            if encoding == "video":
                video = VideoInfo.from_manifest(m.get("video"), what)
                if sum(n for _, n in data) != video.packets or video.packets < count:
                    raise Malformed(f"{what}: its data blobs hold {sum(n for _, n in data)} packets, it claims "
                                    f"{video.packets} for {count} frames")
            elif m.get("video") is not None:
                raise Malformed(f"{what}: a {encoding} stream has no video entry")
        elif encoding is not None or sizes is not None or m.get("video") is not None:
            raise Malformed(f"{what}: an {kind} stream has no encoding or sizes")
        frame = string(m, "frame", what, optional=True)
        if frame is not None and frame not in FRAMES:
            raise Malformed(f"{what}: frame {frame[:20]!r} is not one of {FRAMES}")
        stream_names = m.get("names")
        if stream_names is not None and not (isinstance(stream_names, list) and all(isinstance(x, str) for x in stream_names)):
            raise Malformed(f"{what}: names is not a list of strings")
        meta = m.get("meta", {})
        return cls(
            name=name,
            kind=kind,
            count=count,
            dtype=dt.str,
            shape=checked_shape(m.get("shape"), what),
            timestamps=names.digest(m.get("timestamps"), f"{what}: timestamps"),
            data=tuple(data),
            encoding=encoding,
            sizes=None if sizes is None else names.digest(sizes, f"{what}: sizes"),
            units=string(m, "units", what, optional=True),
            names=tuple(stream_names) if stream_names is not None else None,
            frame=frame,
            meta=dict(mapping(meta, f"{what}: meta")),
            video=video,
        )


@dataclass(frozen=True)
class VideoInfo:
    """What a segment manifest says of a stored video beyond an image stream's: its codec,
    extradata, how many packets, whether they reorder (packets' times not in decode order), and
    the blob of each packet's presentation time and keyframe flag (npy int64 ``(packets, 2)``)."""

    codec: str
    packets: int
    index: str
    extradata: bytes = b""
    reorders: bool = False

    def to_manifest(self) -> dict[str, Any]:
        return {"codec": self.codec, "packets": self.packets, "index": self.index,
                "extradata": self.extradata.hex(), "reorders": self.reorders}

    @classmethod
    def from_manifest(cls, m: Any, what: str) -> VideoInfo:
        what = f"{what}: video"
        mapping(m, what)
        codec = m.get("codec")
        if codec not in VIDEO_CODECS:
            raise Malformed(f"{what}: codec {str(codec)[:20]!r} is not one of {', '.join(VIDEO_CODECS)}")
        extradata = m.get("extradata", "")
        try:
            raw = bytes.fromhex(extradata) if isinstance(extradata, str) and len(extradata) <= 1 << 17 else None
        except ValueError:
            raw = None
        if raw is None:
            raise Malformed(f"{what}: extradata is not a short hex string")
        reorders = m.get("reorders", False)
        if not isinstance(reorders, bool):
            raise Malformed(f"{what}: reorders is not true or false")
        return cls(codec, integer(m, "packets", what, 1, MAX_COUNT), names.digest(m.get("index"), f"{what}: index"),
                   raw, reorders)
