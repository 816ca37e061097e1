"""An MP4 of one camera stream (PyAV): every frame, at the stream's median rate."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from rayform.errors import InvalidInput
from rayform.preview.sheet import displayable
from rayform.recordings.segment_reader import Segment

CODECS = ("libx264", "h264", "mpeg4")  # the first one this PyAV build can encode


def write_video(segment: Segment, stream: str, path: Path) -> Path:
    """Encode ``stream``'s frames to ``path`` (H.264 where available, yuv420p: any player
    opens it). Odd sizes are padded by one pixel, as 4:2:0 needs even ones."""
    import av

    info = segment.stream(stream)
    if not info.is_image:
        raise InvalidInput(f"{segment.id}: stream {stream!r} holds values, not frames; plot it instead")
    ts = segment.timestamps(stream)
    period = float(np.median(np.diff(ts))) if len(ts) > 1 else 1e9 / 30
    rate = Fraction(1e9 / period if period > 0 else 30.0).limit_denominator(1001)
    codec = next((c for c in CODECS if c in av.codecs_available), None)
    if codec is None:
        raise InvalidInput(f"this PyAV build encodes none of {', '.join(CODECS)}; install av from PyPI")
    h, w = info.shape[0], info.shape[1]
    with av.open(str(path), mode="w") as container:
        out = container.add_stream(codec, rate=rate)
        out.width, out.height, out.pix_fmt = w + w % 2, h + h % 2, "yuv420p"
        for i in range(info.count):
            image = displayable(segment.frame_array(stream, i))
            if image.shape[:2] != (out.height, out.width):
                image = np.pad(image, ((0, out.height - image.shape[0]), (0, out.width - image.shape[1]), (0, 0)),
                               mode="edge")
            for packet in out.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in out.encode():
            container.mux(packet)
    return path
