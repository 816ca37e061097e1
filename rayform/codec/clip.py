"""The clip: how a pack stores video. A clip is a few consecutive frames of one camera, encoded as one
closed group of pictures (it decodes alone, from its first packet), stored as one msgpack
document::

    {"codec": "h264" | "av1" | "hevc", "width": W, "height": H, "extradata": bytes,
     "frames": n, "packets": [bytes, ...], "keys": [packet indices that are keyframes],
     "reorders": bool}

Packets are in decode order; frames come out of the decoder in presentation order, so frame
``i`` of a clip is the ``i``-th frame decoded. Where the codec does not reorder (``reorders``
false: AV1, or H.264/HEVC without B-frames, which is how packs encode), a frame decodes from
the last keyframe at or before it.

A clip is untrusted input (it comes from a shard): every field is checked, and against what
the pack's schema says (codec, size), before a decoder sees a byte (``read_clip``). Decoding
is ``rayform.codec.video``, encoding ``rayform.codec.video_encoder``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rayform.codec import records
from rayform.codec.codecs import VIDEO_CODECS
from rayform.errors import Malformed
from rayform.untrusted import integer

MAX_SIDE = 16384
MAX_PACKETS = 4096
MAX_EXTRADATA = 1 << 16


@dataclass(frozen=True)
class Clip:
    """One encoded clip (see the module's note)."""

    codec: str
    width: int
    height: int
    frames: int
    packets: tuple[bytes | memoryview, ...]
    keys: tuple[int, ...] = (0,)
    extradata: bytes = b""
    reorders: bool = False

    def to_doc(self) -> dict[str, Any]:
        return {"codec": self.codec, "width": self.width, "height": self.height, "extradata": bytes(self.extradata),
                "frames": self.frames, "packets": [bytes(p) for p in self.packets], "keys": list(self.keys),
                "reorders": self.reorders}

    def to_bytes(self) -> bytes:
        return records.dumps(self.to_doc())

    @property
    def nbytes(self) -> int:
        return sum(len(p) for p in self.packets)

    def start_for(self, frame: int) -> int:
        """The packet a decode of ``frame`` starts at: the last keyframe at or before it, where
        packets are frames in order; else the first."""
        if self.reorders:
            return 0
        return max((k for k in self.keys if k <= frame), default=0)


def read_clip(data: bytes | memoryview | dict[str, Any], what: str, codec: str | None = None,
              size: tuple[int, int] | None = None) -> Clip:
    """The clip in ``data`` (its bytes, or their msgpack document), every field checked (and
    against the schema's ``codec`` and ``size`` (H, W) where given) before anything is decoded
    or allocated for it."""
    doc = data if isinstance(data, dict) else records.loads(data, what)
    if not isinstance(doc, dict):
        raise Malformed(f"{what}: not a clip")
    name = doc.get("codec")
    if name not in VIDEO_CODECS:
        raise Malformed(f"{what}: codec {str(name)[:20]!r} is not one of {', '.join(VIDEO_CODECS)}")
    if codec is not None and name != codec:
        raise Malformed(f"{what}: its clip is {name} where the pack says {codec}")
    width, height, frames = (integer(doc, field, what, 1, hi) for field, hi in
                             (("width", MAX_SIDE), ("height", MAX_SIDE), ("frames", MAX_PACKETS)))
    if size is not None and (height, width) != tuple(size):
        raise Malformed(f"{what}: its frames claim {width}x{height}, the pack's schema {size[1]}x{size[0]}")
    packets, keys, extradata = doc.get("packets"), doc.get("keys"), doc.get("extradata", b"")
    if not isinstance(packets, list) or not 1 <= len(packets) <= MAX_PACKETS or \
            not all(isinstance(p, bytes) and p for p in packets):
        raise Malformed(f"{what}: its packets are not 1..{MAX_PACKETS} byte strings")
    if len(packets) < frames:
        raise Malformed(f"{what}: {len(packets)} packets for {frames} frames")
    if not isinstance(keys, list) or not keys or keys[0] != 0 or \
            not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < len(packets) for k in keys):
        raise Malformed(f"{what}: its keyframes {str(keys)[:40]} are not packet indices starting at 0")
    if not isinstance(extradata, bytes) or len(extradata) > MAX_EXTRADATA:
        raise Malformed(f"{what}: its codec extradata is not a short byte string")
    return Clip(name, width, height, frames, tuple(packets), tuple(keys), extradata, bool(doc.get("reorders")))
