"""Frames encoded as clips: how a pack makes a video camera's clips (``codec.clip``).

x264 (H.264), SVT-AV1 (AV1) or x265 (HEVC, where the FFmpeg has it) through PyAV, one
thread each (a pack's processes are the parallelism), every clip one closed group of
pictures with no B-frames: it decodes alone, its frames in the order they are stored.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from rayform.codec.clip import MAX_PACKETS, Clip
from rayform.codec.codecs import VIDEO, VIDEO_CODECS, crf_value
from rayform.codec.video import load_av
from rayform.errors import InvalidInput

# x264's chroma QP against luma's: on real camera frames, -4 stores 8-10% fewer bytes at the
# same RGB PSNR than 0 (G1 frames at 10 fps, groups of 8 and 16; -2: 6%, -6: as -4, +2: 9%
# more), decoding as fast
CHROMA_QP_OFFSET = -4
NOMINAL_FPS = 30  # the rate every clip is encoded at (its frames' own times are the pack's)
ENCODERS = {name: c.encoder for name, c in VIDEO.items()}
CRF = {name: c.crf for name, c in VIDEO.items()}
PRESET = {name: c.preset for name, c in VIDEO.items()}
_QUIET = {"SVT_LOG": "1"}  # SVT-AV1 prints its banner to stderr at every encoder otherwise


@functools.cache
def x264_instructions() -> str:
    """The instruction set x264 is held to ("" = its own choice): AVX2 on a processor with
    AVX-512. x264's AVX-512 routines read memory it never wrote (its macroblock-tree rate
    control), so the same frames gave other bytes from one process to the next (and within one
    as its heap changed): 1 in 25 encodes of a clip, and 1 in 6 packs. Held to AVX2 (as
    valgrind's checked run is), no encode has differed since. Where the processor has no
    AVX-512, x264 never runs those routines, and its own choice stands."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line.split(":", 1)[1].split() for line in info if line.startswith("flags")), [])
    except OSError:
        return ""
    return "AVX2" if "avx2" in flags and any(f.startswith("avx512") for f in flags) else ""


@contextlib.contextmanager
def same_scheduling() -> Iterator[None]:
    """The calling thread's scheduling policy as it was before: SVT-AV1, run as root, makes
    the thread that opens an encoder real-time (SCHED_FIFO, priority 99) and leaves it so. A
    pack's process (or a user's, or a training job's) would then starve everything else on
    its core."""
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    except (AttributeError, OSError):  # not Linux: nothing to keep
        yield
        return
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
            os.sched_setscheduler(0, policy, param)


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
    ``preset`` (its encoder's speed: ``PRESET``), in closed groups of pictures of ``clip_frames``
    frames (a keyframe, then frames that refer back within it; no B-frames), so any frame
    decodes from its group alone; a clip is one group, or several (``encode``'s ``starts``).

    A pack chooses each camera's CRF from its frames (``packer.quality``, ``benchmarks/video.py``);
    ``CRF`` is the codec's where nothing measured them."""


    codec: str = "h264"
    crf: int | float | None = None
    preset: str | None = None
    clip_frames: int = 8

    def __post_init__(self) -> None:
        if self.codec not in VIDEO_CODECS:
            raise InvalidInput(f"video codec {self.codec!r}: one of {', '.join(VIDEO_CODECS)}")
        if self.crf is None:
            object.__setattr__(self, "crf", CRF[self.codec])
        if self.preset is None:
            object.__setattr__(self, "preset", PRESET[self.codec])
        try:
            object.__setattr__(self, "crf", crf_value(self.codec, self.crf))
        except ValueError as e:
            raise InvalidInput(str(e)) from None
        if isinstance(self.clip_frames, bool) or not isinstance(self.clip_frames, int) or \
                not 1 <= self.clip_frames <= 256:
            raise InvalidInput(f"clip frames {self.clip_frames!r}: a whole number of frames, 1..256")
        if not isinstance(self.preset, str) or not 0 < len(self.preset) <= 16:
            raise InvalidInput(f"video preset {str(self.preset)[:20]!r}: a name, e.g. medium (or a number for av1)")

    def options(self, gop: int | None = None) -> dict[str, str]:
        """The encoder's options: its quality and speed, and a closed GOP of ``gop`` frames
        (default ``clip_frames``) with no B-frames (frames decode in order, from its first)."""
        preset, g = str(self.preset), str(gop or self.clip_frames)
        if self.codec == "h264":
            # psnr: no psychovisual tuning (it spends bits on looks, not fidelity); CAVLC and no
            # weighted prediction (x264's fastdecode but for the deblocking, which costs little):
            # 0.6-0.75x the decode time of x264's defaults; chroma finer than luma by
            # CHROMA_QP_OFFSET (a frame is compared as RGB, where chroma error counts as much)
            params = ["cabac=0", "weightp=0", f"chroma-qp-offset={CHROMA_QP_OFFSET}"]
            asm = x264_instructions()
            if asm:
                params.append(f"asm={asm}")
            return {"crf": f"{self.crf:g}", "preset": preset, "tune": "psnr", "bf": "0", "g": g, "keyint_min": g,
                    "sc_threshold": "0", "x264-params": ":".join(params)}
        if self.codec == "hevc":
            return {"crf": f"{self.crf:g}", "preset": preset, "tune": "fastdecode",
                    "x265-params": f"bframes=0:keyint={g}:min-keyint={g}:"
                                   "scenecut=0:log-level=error"}
        # SVT-AV1: low delay (no frames held back to be shown later), a keyframe every clip
        return {"crf": f"{self.crf:g}", "preset": preset, "g": g, "svtav1-params": f"pred-struct=1:keyint={g}"}

    def encode(self, frames: np.ndarray | Sequence[np.ndarray], starts: Sequence[int] | None = None) -> Clip:
        """``frames`` (``(n, H, W, 3) uint8`` RGB) as one clip: a closed group of pictures from
        each of ``starts`` (frame indices; default every ``clip_frames``th; 0 always) to the
        next, each encoded as it would be alone (one encoder each: x264's lookahead, given a
        long run with keyframes forced into it, spends 20-40% more bytes on the same frames), at
        ``NOMINAL_FPS`` whatever rate the frames are at."""
        n = len(frames)
        if not 1 <= n <= MAX_PACKETS:
            raise InvalidInput(f"a clip of {n} frames: 1..{MAX_PACKETS}")
        height, width = frames[0].shape[:2]
        if height % 2 or width % 2 or frames[0].ndim != 3 or frames[0].shape[2] != 3:
            raise InvalidInput(f"{self.codec} encodes RGB frames of even width and height, not "
                               f"{'x'.join(map(str, frames[0].shape))}: pack with a resize to an even size")
        load_av()
        from av.video.reformatter import VideoReformatter

        os.environ.update({k: v for k, v in _QUIET.items() if k not in os.environ})
        convert = VideoReformatter()  # one swscale context for the clip, not one a frame
        if starts is None:
            starts = range(0, n, self.clip_frames)
        bounds = sorted({0, *(int(k) for k in starts if 0 < int(k) < n)}) + [n]
        packets: list[bytes] = []
        keys: list[int] = []
        extradata = None
        for first, end in zip(bounds, bounds[1:]):
            with same_scheduling():
                group, data = self._group(frames[first:end], convert)
            if extradata is not None and data != extradata:
                raise InvalidInput(f"the {self.codec} encoder made different parameter sets for one clip's groups")
            extradata = data
            keys.append(len(packets))
            packets += group
        return Clip(self.codec, width, height, n, tuple(packets), tuple(keys), extradata or b"")

    def _group(self, frames: np.ndarray | Sequence[np.ndarray], convert: Any) -> tuple[list[bytes], bytes]:
        """One closed group of pictures (frames checked by ``encode``; ``convert``, its
        ``VideoReformatter``): its packets, and its encoder's extradata."""
        av = load_av()
        n = len(frames)
        height, width = frames[0].shape[:2]
        context = av.CodecContext.create(ENCODERS[self.codec], "w")
        context.width, context.height, context.pix_fmt = width, height, "yuv420p"
        context.time_base = Fraction(1, 1000)
        # one nominal rate whatever the pack's: x264's rate control spends more bits a frame the
        # lower the rate it is told (the same 240 frames: 0.21x JPEG's bytes told 15 fps, 0.15x
        # told 30, at 1.3 dB apart), and a clip's frames are timed by the pack, not the stream
        context.framerate = Fraction(NOMINAL_FPS)
        context.thread_count = 1  # the pack's processes are the parallelism
        context.options = self.options(max(n, self.clip_frames))
        packets: list[Any] = []
        for i, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
            frame = convert.reformat(frame, format="yuv420p", threads=1)  # as codec.video.to_rgb: no pool
            frame.pts = int(round(i * 1000 / NOMINAL_FPS))  # from the group's start: the rate control reads durations
            packets += context.encode(frame)
        packets += context.encode(None)
        if len(packets) != n or not packets[0].is_keyframe or any(p.is_keyframe for p in packets[1:]):
            raise InvalidInput(f"the {self.codec} encoder made {len(packets)} packets of {n} frames"
                               + ("" if len(packets) != n else ", not one keyframe then none"))
        return [bytes(p) for p in packets], bytes(context.extradata or b"")
