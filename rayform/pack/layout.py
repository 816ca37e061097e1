"""How a pack lays out its samples: the one description the packer writes and the readers read.

A sample is the tar members of one key::

    <key>.<stream with / as .>.jpg|png|npy   one per image stream (not video)
    <key>.lowdim.mp                          the record: t_ns, index, the META fields, and per
                                             array stream its values at t + j/fps,
                                             j = 0..max_horizon ("future"), with the pad mask ("pad")

A video pack (``StreamSchema.video`` on a camera) has no ``lowdim.mp``: its samples come in
clips of up to ``clip_frames`` consecutive samples of one segment (8; 64 with history, a
keyframe every ``gop_frames`` inside: ``pack.spec``), next to each other in the pack and in
one shard, and the first sample of each holds ``<key>.clips.mp``::

    {"record": {"samples": n, "t_ns": [n], "index": [n], "rows_from": k0, the META fields,
                "arrays": {stream: {"values": (rows, *shape), "pad": (rows,)}},
                "history_pad": (rows,), "frames": {camera: (n, 1 + max_history) int32}},
     "video": {camera: a clip (``codec.clip``)}}

Row ``r`` of the arrays is the grid step ``k0 + r`` (sample ``j``'s future is the rows from
``index[j] − k0`` on, its past the ``max_history`` before); ``frames[j]`` are sample ``j``'s
frames in its camera's clip, now then each step back.

The offset index is an int64 ``(samples, 3 + 2 * members)`` array: shard number, the
sample's span (start and end offsets in that shard), then ``(data offset, size)`` of each
member in the pack's ``members`` order (sorted, as the tar holds them). A video pack's index
has one more lead column, after the span: the sample's place in its clip; every sample of a
clip points at the first's ``clips.mp``, and its span starts where the first's does (so the
span holds every byte it reads). Samples are numbered in shard order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rayform.codec.clip import MAX_SIDE
from rayform.errors import Malformed
from rayform.frames import FRAMES
from rayform.recordings.streams import stored_stream
from rayform.untrusted import dtype as checked_dtype
from rayform.untrusted import shape as checked_shape

LOWDIM = "lowdim.mp"  # ".mp": the extension webdataset decodes as msgpack
CLIPS = "clips.mp"  # a video pack's, in the first sample of each clip
IMAGE_FORMATS = ("jpg", "png", "npy", "clip")


@dataclass(frozen=True)
class VideoSchema:
    """How a pack holds a video camera: ``codec``, samples per clip, and either ``kept`` (the
    recorded packets copied) or the encoder's ``crf`` and ``preset``; ``why``: why a ``keep``
    pack encoded it."""

    codec: str
    clip_frames: int
    kept: bool = False
    crf: int | float | None = None  # float: a fraction of x264's or x265's scale
    preset: str | None = None
    why: str | None = None
    packet_bytes: int | None = None  # its clips' packets in the pack (known once packed)
    gop: int | None = None  # the most frames from a keyframe to the next (encoded: gop_frames + max_history)
    psnr: float | None = None  # dB, encoded against the frames packed, measured on a sample of clips
    jpeg_psnr: float | None = None  # the same frames as JPEG at quality 90, for comparison
    crf_by: str | None = None  # how its crf was chosen: "given", "a PSNR of N dB", "JPEG q90 − N dB"

    def to_manifest(self) -> dict[str, Any]:
        out = {"codec": self.codec, "clip_frames": self.clip_frames, "kept": self.kept, "crf": self.crf,
               "preset": self.preset, "why": self.why, "packet_bytes": self.packet_bytes, "gop": self.gop}
        if self.psnr is not None:  # a pack made before they were measured says nothing of them
            out.update(psnr=self.psnr, jpeg_psnr=self.jpeg_psnr)
        if self.crf_by is not None:
            out["crf_by"] = self.crf_by
        return out

    @classmethod
    def from_manifest(cls, m: Any, what: str) -> VideoSchema:
        from rayform.codec.codecs import VIDEO_CODECS as CODECS

        if not isinstance(m, dict) or m.get("codec") not in CODECS or type(m.get("kept")) is not bool:
            raise Malformed(f"{what}: its video entry is not a codec ({', '.join(CODECS)}) and kept flag")
        frames, crf = m.get("clip_frames"), m.get("crf")
        if type(frames) is not int or not 1 <= frames <= 256 or \
                (crf is not None and (type(crf) not in (int, float) or not 0 <= crf <= 63)):
            raise Malformed(f"{what}: video clip frames {str(frames)[:12]} or crf {str(crf)[:12]} is not a number")
        preset, why, crf_by = m.get("preset"), m.get("why"), m.get("crf_by")
        if not all(v is None or (isinstance(v, str) and len(v) <= 400) for v in (preset, why, crf_by)):
            raise Malformed(f"{what}: video preset, why or crf_by is not a short string")
        size, gop = m.get("packet_bytes"), m.get("gop")
        if not all(v is None or (type(v) is int and v >= 0) for v in (size, gop)):
            raise Malformed(f"{what}: video bytes {str(size)[:20]} or GOP {str(gop)[:20]} is not a count")
        quality = [m.get("psnr"), m.get("jpeg_psnr")]
        if not all(v is None or (type(v) in (int, float) and 0 <= v <= 1000) for v in quality):
            raise Malformed(f"{what}: video PSNR {str(quality)[:40]} is not a number of dB")
        return cls(m["codec"], frames, m["kept"], crf, preset, why, size, gop, quality[0], quality[1], crf_by)


@dataclass(frozen=True)
class StreamSchema:
    """How one stream appears in the shards."""

    name: str
    kind: str
    member: str  # tar member extension, e.g. "cam0.rgb.jpg"
    dtype: str
    shape: tuple[int, ...]
    units: str | None = None
    names: tuple[str, ...] | None = None
    frame: str | None = None
    video: VideoSchema | None = None  # a camera packed as video

    @property
    def format(self) -> str:
        return self.member.rsplit(".", 1)[1]

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "member": self.member, "dtype": self.dtype, "shape": list(self.shape),
               "units": self.units, "names": list(self.names) if self.names else None, "frame": self.frame}
        if self.video is not None:
            out["video"] = self.video.to_manifest()
        return out

    @classmethod
    def from_manifest(cls, name: str, m: dict[str, Any], what: str = "pack manifest") -> StreamSchema:
        """A schema entry of a stored pack manifest, checked (it is untrusted)."""
        what, kind = stored_stream(name, m, what)
        member = m["member"]
        base = name.replace("/", ".")
        if kind == "image" and member not in {f"{base}.{fmt}" for fmt in IMAGE_FORMATS}:
            raise Malformed(f"{what}: image member {str(member)[:80]!r} is not {base}.jpg|png|npy|clip")
        video = VideoSchema.from_manifest(m["video"], what) if m.get("video") is not None else None
        if (video is not None) != (member == f"{base}.clip"):
            raise Malformed(f"{what}: a .clip member goes with a video entry, and only it")
        if kind != "image" and member != base:
            raise Malformed(f"{what}: member {str(member)[:80]!r} is not {base}")
        shape = checked_shape(m["shape"], what)
        if kind == "image" and (len(shape) not in (2, 3) or not all(1 <= d <= MAX_SIDE for d in shape[:2])
                                or (len(shape) == 3 and shape[2] not in (1, 3, 4))):
            raise Malformed(f"{what}: an image is (H, W[, C]) with sides of 1..{MAX_SIDE} and 1, 3 or 4 "
                            f"channels, not {shape}")
        frame = m.get("frame")
        if frame is not None and frame not in FRAMES:
            raise Malformed(f"{what}: frame {str(frame)[:20]!r} is not one of {FRAMES}")
        names = m.get("names")
        if names and not all(isinstance(n, str) for n in names):
            raise Malformed(f"{what}: names is not a list of strings")
        units = m.get("units")
        if units is not None and not isinstance(units, str):
            raise Malformed(f"{what}: units is not a string")
        if video is not None and (shape[2:] != (3,) or checked_dtype(m["dtype"], what) != "|u1"):
            raise Malformed(f"{what}: a video camera is (H, W, 3) uint8, not {shape}")
        return cls(name, kind, member, checked_dtype(m["dtype"], what).str, shape, units,
                   tuple(names) if names else None, frame, video)


META_KEYS = ("slice", "segment", "segment_version", "site")  # the record's fields a sample's meta holds
INDEX_LEAD = 3  # shard, sample start, sample end; then (offset, size) per member


def history_member(member: str, steps_back: int) -> str:
    """The member holding an image stream's frame ``steps_back`` grid steps before the
    sample's instant (``cam0.rgb.jpg`` → ``cam0.rgb.h2.jpg``); 0: the member itself."""
    if not steps_back:
        return member
    base, _, ext = member.rpartition(".")
    return f"{base}.h{steps_back}.{ext}"


def members_of(schema: Mapping[str, StreamSchema], max_history: int = 0) -> list[str]:
    """A sample's tar members, in the order the tar (and the index) holds them."""
    images = [history_member(s.member, j) for s in schema.values() if s.kind == "image" and s.video is None
              for j in range(max_history + 1)]
    return sorted(images + [CLIPS if has_video(schema) else LOWDIM])


def has_video(schema: Mapping[str, StreamSchema]) -> bool:
    return any(s.video is not None for s in schema.values())


def clip_members(schema: Mapping[str, StreamSchema]) -> set[str]:
    """The members a sample shares with the first sample of its clip."""
    return {CLIPS} if has_video(schema) else set()


def index_lead(members: Iterable[str]) -> int:
    """The index's columns before the members': shard, span start, span end (and in a video
    pack, the place in the clip)."""
    return INDEX_LEAD + (CLIPS in members)


def index_columns(members: Iterable[str]) -> int:
    members = list(members)
    return index_lead(members) + 2 * len(members)


def member_column(members: list[str], member: str) -> int:
    """Column of ``member``'s data offset in the index (its size is the next one)."""
    return index_lead(members) + 2 * members.index(member)
