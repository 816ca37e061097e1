"""A recorded video file's packets, as recorded: what a converter stores as a ``VideoStream``.

The packets of ``[from_s, to_s)`` of the file's first video stream are read without decoding
(``container.demux``), with a lead-in from the keyframe at or before the first frame (so the
stored stream decodes on its own) and, where packets are reordered (B-frames), what the last
frames need after them. Each frame's time is the container's, exact, counted from the first
frame, which is put at ``t0_ns``. The frames found must be the ones the episode says it has.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import IO, Any

import numpy as np

from rayform.codec.codecs import VIDEO
from rayform.errors import InvalidInput
from rayform.recordings.streams import VideoStream

# the codec a file's stream is, by the name of the decoder PyAV opened it with (libaom-av1: a
# build without dav1d); only the codecs a segment may keep as recorded
CODECS = {**{name: name for name in VIDEO}, **{d: name for name, c in VIDEO.items() for d in c.decoders},
          "libaom-av1": "av1"}
NS = 1_000_000_000


def demux_video(source: IO[bytes] | str, path: PurePath, name: str, span: tuple[float, float | None], expected: int,
                fps: float, t0_ns: int = 0, meta: dict[str, Any] | None = None) -> VideoStream:
    """Stream ``name``: the packets of ``span``, ``[from_s, to_s)`` s, of the video file ``path``
    (read from ``source``: its local path or the file opened; to its end if ``to_s`` is None),
    which must show ``expected`` frames at about ``fps``."""
    import av

    from_s, to_s = span

    try:
        with av.open(source) as container:
            if not container.streams.video:
                raise InvalidInput(f"{path}: no video stream")
            stream = container.streams.video[0]
            codec = CODECS.get(stream.codec_context.name)
            if codec is None:
                raise InvalidInput(f"{path}: {stream.codec_context.name} video is not kept as recorded "
                                   f"(AV1, H.264 and HEVC are); ingest with --decode-video")
            tb = stream.time_base
            if from_s > 0:  # a file of many episodes: from the keyframe before this one's first frame
                container.seek(int(max(0.0, from_s - 1.0) / tb), stream=stream, backward=True)
            stop = None if to_s is None else int((to_s + 1.0) / tb)  # B-frames' references come a little later
            packets = []
            for p in container.demux(stream):
                if p.size and p.pts is not None:
                    if stop is not None and p.dts is not None and p.dts > stop:
                        break
                    packets.append((p.pts, bool(p.is_keyframe), bytes(p)))
            extradata = bytes(stream.codec_context.extradata or b"")
            width, height = stream.codec_context.width, stream.codec_context.height
    except av.FFmpegError as e:
        raise InvalidInput(f"{path}: cannot read the video ({e})") from None
    pts = np.array([p[0] for p in packets], np.int64)
    seconds = pts * float(tb)
    half = 0.5 / fps
    shown = (seconds >= from_s - half) & ((seconds < to_s - half) if to_s is not None else True)
    frames = np.flatnonzero(shown)  # in decode order
    if len(frames) != expected:
        raise InvalidInput(f"{path}: {len(frames)} video frames in [{from_s:.3f}, {to_s}) s, the data has {expected}")
    keys = np.flatnonzero([p[1] for p in packets[: frames.min() + 1]])
    if not len(keys):
        raise InvalidInput(f"{path}: no keyframe at or before the frame at {from_s:.3f} s")
    first, last = int(keys[-1]), int(frames.max())
    kept = packets[first:last + 1]
    # exact: rational container time from the first frame, in ns
    start = int(np.min(pts[frames]))
    num, den = tb.numerator * NS, tb.denominator
    times = [t0_ns + ((p[0] - start) * num * 2 + den) // (2 * den) for p in kept]  # exact, rounded
    frame_times = np.sort(np.array([t for t, i in zip(times, range(first, last + 1)) if shown[i]], np.int64))
    return VideoStream(name, frame_times, [p[2] for p in kept], np.array(times, np.int64),
                       np.array([p[1] for p in kept], bool), codec, width, height, extradata,
                       meta={"source": "video", "file": path.name, **(meta or {})})
