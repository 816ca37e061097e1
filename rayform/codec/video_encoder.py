"""Frames encoded as clips: how a pack makes a video camera's clips (``codec.clip``).

x264 (H.264), SVT-AV1 (AV1) or x265 (HEVC, where the FFmpeg has it) through PyAV, one
thread each (a pack's processes are the parallelism), every clip one closed group of
pictures with no B-frames: it decodes alone, its frames in the order they are stored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from rayform.codec.clip import CODECS, MAX_PACKETS, Clip
from rayform.codec.video import load_av
from rayform.errors import InvalidInput

ENCODERS = {"h264": "libx264", "av1": "libsvtav1", "hevc": "libx265"}
CRF = {"h264": 17, "hevc": 18, "av1": 28}
PRESET = {"h264": "medium", "hevc": "medium", "av1": "8"}
_QUIET = {"SVT_LOG": "1"}  # SVT-AV1 prints its banner to stderr at every encoder otherwise


def encoders() -> tuple[str, ...]:
    """The codecs this FFmpeg can encode."""
    av = load_av()
    found = []
    for codec, name in ENCODERS.items():
        try:
            av.Codec(name, "w")
        except Exception:  # PyAV raises its UnknownCodecError (a ValueError) or an FFmpegError
            continue
        found.append(codec)
    return tuple(found)


@dataclass(frozen=True)
class VideoCodec:
    """How a pack encodes a camera's frames: ``codec`` (``h264``, ``av1``, ``hevc``), its
    quality (``crf``: lower is better and larger; by default the codec's in ``CRF``) and
    ``preset`` (its encoder's speed: ``PRESET``), in clips of ``clip_frames`` frames: a clip
    is one closed group of pictures (a keyframe, then frames that refer back within it; no
    B-frames), so any frame decodes from its clip alone.

    The defaults were measured on real robot camera frames at 224x224 (``benchmarks/video.py``):
    H.264 at crf 17 stores an eighth of JPEG q90's bytes at a PSNR about 1.1 dB below JPEG's."""


    codec: str = "h264"
    crf: int | None = None
    preset: str | None = None
    clip_frames: int = 8

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise InvalidInput(f"video codec {self.codec!r}: one of {', '.join(CODECS)}")
        if self.crf is None:
            object.__setattr__(self, "crf", CRF[self.codec])
        if self.preset is None:
            object.__setattr__(self, "preset", PRESET[self.codec])
        if isinstance(self.crf, bool) or not isinstance(self.crf, int) or not 0 <= self.crf <= 63:
            raise InvalidInput(f"video crf {self.crf!r}: a whole number, 0..63")
        if isinstance(self.clip_frames, bool) or not isinstance(self.clip_frames, int) or \
                not 1 <= self.clip_frames <= 256:
            raise InvalidInput(f"clip frames {self.clip_frames!r}: a whole number of frames, 1..256")
        if not isinstance(self.preset, str) or not 0 < len(self.preset) <= 16:
            raise InvalidInput(f"video preset {str(self.preset)[:20]!r}: a name, e.g. medium (or a number for av1)")

    def options(self) -> dict[str, str]:
        """The encoder's options: its quality and speed, and a closed GOP of the whole clip with
        no B-frames (frames decode in order, from the clip's first)."""
        preset = str(self.preset)
        if self.codec == "h264":
            # psnr: no psychovisual tuning (it spends bits on looks, not fidelity); fastdecode: no
            # CABAC, no deblocking, about half the decode time of x264's defaults
            return {"crf": str(self.crf), "preset": preset, "tune": "psnr,fastdecode", "bf": "0",
                    "g": str(self.clip_frames), "keyint_min": str(self.clip_frames), "sc_threshold": "0"}
        if self.codec == "hevc":
            return {"crf": str(self.crf), "preset": preset, "tune": "fastdecode",
                    "x265-params": f"bframes=0:keyint={self.clip_frames}:min-keyint={self.clip_frames}:"
                                   "scenecut=0:log-level=error"}
        # SVT-AV1: low delay (no frames held back to be shown later), a keyframe every clip
        return {"crf": str(self.crf), "preset": preset, "g": str(self.clip_frames),
                "svtav1-params": f"pred-struct=1:keyint={self.clip_frames}"}

    def encode(self, frames: np.ndarray | Sequence[np.ndarray], fps: float) -> Clip:
        """``frames`` (``(n, H, W, 3) uint8`` RGB) as one clip."""
        av = load_av()
        from av.video.reformatter import VideoReformatter

        n = len(frames)
        if not 1 <= n <= MAX_PACKETS:
            raise InvalidInput(f"a clip of {n} frames: 1..{MAX_PACKETS}")
        height, width = frames[0].shape[:2]
        if height % 2 or width % 2 or frames[0].ndim != 3 or frames[0].shape[2] != 3:
            raise InvalidInput(f"{self.codec} encodes RGB frames of even width and height, not "
                               f"{'x'.join(map(str, frames[0].shape))}: pack with a resize to an even size")
        os.environ.update({k: v for k, v in _QUIET.items() if k not in os.environ})
        context = av.CodecContext.create(ENCODERS[self.codec], "w")
        context.width, context.height, context.pix_fmt = width, height, "yuv420p"
        context.time_base = Fraction(1, 1000)
        context.framerate = Fraction(fps).limit_denominator(1000)
        context.thread_count = 1  # the pack's processes are the parallelism
        context.options = self.options()
        convert = VideoReformatter()  # one swscale context for the clip, not one a frame
        packets: list[Any] = []
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame = convert.reformat(frame, format="yuv420p", threads=1)  # as codec.video.to_rgb: no pool
            frame.pts = int(round(i * 1000 / fps))
            packets += context.encode(frame)
        packets += context.encode(None)
        if len(packets) != n or not packets[0].is_keyframe:
            raise InvalidInput(f"the {self.codec} encoder made {len(packets)} packets of {n} frames"
                               + ("" if len(packets) != n else ", the first not a keyframe"))
        keys = tuple(i for i, p in enumerate(packets) if p.is_keyframe)
        return Clip(self.codec, width, height, n, tuple(bytes(p) for p in packets), keys,
                    bytes(context.extradata or b""))
