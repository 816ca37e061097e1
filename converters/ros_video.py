"""``foxglove_msgs/CompressedVideo`` messages as a ``VideoStream``: each message one frame's
packets (no B-frames: Foxglove's rule), kept as recorded.

A message gives the bytes, the format (``h264`` and ``h265`` in Annex B with their parameter
sets in band, ``av1`` as a temporal unit of OBUs) and the time. Which messages are keyframes
is read from the bitstream's own headers, not decoded: an H.264 IDR NAL unit (type 5), an
H.265 IRAP one (types 16 to 21), an AV1 sequence header OBU. The frames' size comes from
decoding the first keyframe. Messages before the first keyframe would not decode: left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rayform.errors import InvalidInput
from rayform.recordings.streams import VideoStream

MSGTYPE = "foxglove_msgs/msg/CompressedVideo"
FORMATS = {"h264": "h264", "h265": "hevc", "hevc": "hevc", "av1": "av1"}


def _nal_types(data: bytes, hevc: bool) -> set[int]:
    """The NAL unit types of an Annex B payload."""
    out = set()
    at = data.find(b"\x00\x00\x01")
    while at != -1 and at + 3 < len(data):
        header = data[at + 3]
        out.add((header >> 1) & 0x3F if hevc else header & 0x1F)
        at = data.find(b"\x00\x00\x01", at + 3)
    return out


def _av1_sequence_header(data: bytes) -> bool:
    """Whether a temporal unit holds a sequence header OBU (obu_type 1), walking its OBUs."""
    at = 0
    while at < len(data):
        header = data[at]
        obu_type, extension, has_size = (header >> 3) & 0x0F, (header >> 2) & 1, (header >> 1) & 1
        if obu_type == 1:
            return True
        at += 1 + extension
        if not has_size:
            return False
        size = shift = 0
        while at < len(data):  # leb128
            byte = data[at]
            at += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        at += size
    return False


def is_keyframe(data: bytes, codec: str) -> bool:
    if codec == "h264":
        return 5 in _nal_types(data, hevc=False)
    if codec == "hevc":
        return bool(_nal_types(data, hevc=True) & set(range(16, 22)))
    return _av1_sequence_header(data)


def video_stream(name: str, times: Sequence[int] | np.ndarray, packets: Sequence[bytes], formats: Sequence[str],
                 path: Path, topic: str) -> VideoStream:
    """The messages of one topic (in time order) as a ``VideoStream`` of their packets as recorded."""
    codecs = {FORMATS.get(f.lower()) for f in formats}
    if None in codecs or len(codecs) != 1:
        raise InvalidInput(f"{path}: {topic}: video format {sorted(set(formats))[:3]} is not one of "
                           f"{', '.join(FORMATS)} (and one of them throughout)")
    codec = codecs.pop()
    assert codec is not None
    keys = np.array([is_keyframe(bytes(p), codec) for p in packets], bool)
    if not keys.any():
        raise InvalidInput(f"{path}: {topic}: no keyframe in its {len(packets)} {codec} messages")
    first = int(np.flatnonzero(keys)[0])
    kept = [bytes(p) for p in packets[first:]]
    t = np.asarray(times[first:], np.int64)
    if np.any(np.diff(t) <= 0):
        raise InvalidInput(f"{path}: {topic}: two video messages share a time, or go back")
    height, width = _size(kept[0], codec, path, topic)
    return VideoStream(name, t, kept, t, keys[first:], codec, width, height, b"",
                       meta={"source": "ros", "topic": topic, "format": codec})


def _size(keyframe: bytes, codec: str, path: Path, topic: str) -> tuple[int, int]:
    """The frames' height and width, from decoding the first keyframe."""
    import av

    from rayform.codec.video import decoder_context

    context = decoder_context(codec)
    try:
        for packet in (av.Packet(keyframe), None):
            for frame in context.decode(packet):
                return frame.height, frame.width
    except av.FFmpegError as e:
        raise InvalidInput(f"{path}: {topic}: its first keyframe does not decode ({e})") from None
    raise InvalidInput(f"{path}: {topic}: its first keyframe decodes to no frame")
