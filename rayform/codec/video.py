"""Clips decoded to frames: the decoder seam.

:class:`ClipDecoder` is what a reader asks of a decoder: the frames it wants of a clip, as
RGB arrays at the size it wants. :class:`PyAVDecoder` is FFmpeg on the CPU through PyAV
(the ``video`` extra: libdav1d for AV1, FFmpeg's own H.264 and HEVC), one decoder context
and one colour converter kept per codec, per process and thread. A GPU decoder (NVDEC through
PyNvVideoCodec or torchcodec) plugs in as one more class with the same ``decode``: it gets the
clip's packets and extradata as bytes and gives back ``(H, W, 3) uint8`` arrays (or tensors
already on the device).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from rayform.codec.clip import Clip
from rayform.codec.codecs import VIDEO
from rayform.errors import InvalidInput, Malformed

DECODERS = {name: c.decoders for name, c in VIDEO.items()}  # fastest first
# A damaged bitstream is an error, never frames the decoder made up: FFmpeg checks all it can
# (``err_detect``: a bitstream or buffer error explodes the packet) and a frame it had to
# conceal is marked corrupt and refused. Concealment stays on: FFmpeg's H.264 decoder without it
# (``ec`` 0) marks every frame of a clean stream corrupt when it runs on one thread. A bit
# flipped at random in x264's output is found in 232 of 294 trials that change a frame (the
# rest decode to other pixels: H.264 carries no checksum); not one frame of the real recordings
# in ../shared/data/real is refused.
STRICT = {"err_detect": "crccheck+bitstream+buffer+explode+careful+compliant+aggressive"}


class ClipDecoder(Protocol):
    """How a reader turns clips into frames."""

    decoded: int  # frames decoded so far (wanted or not), for measures

    def decode(self, clip: Clip, wanted: Sequence[int], size: tuple[int, int] | None, what: str
               ) -> dict[int, np.ndarray]:
        """Frames ``wanted`` (indices into the clip, in presentation order) as ``(H, W, 3)
        uint8`` RGB, at ``size`` (H, W; None: as encoded); a bad clip is one ``Malformed``
        naming ``what``."""
        ...


class PyAVDecoder:
    """Clips decoded by FFmpeg through PyAV. A clip decodes from the keyframe at or before the
    first frame wanted up to the last; only the frames wanted are converted (and scaled, in the
    same pass) to RGB. ``threads``: FFmpeg's threads per decoder (1: a DataLoader's workers are
    the parallelism; more only where the decoder is made in the process that uses it, since
    FFmpeg's threads do not survive a fork)."""

    def __init__(self, threads: int = 1):
        self.threads = threads
        self.decoded = 0
        self._kept = threading.local()

    def decode(self, clip: Clip, wanted: Sequence[int], size: tuple[int, int] | None, what: str
               ) -> dict[int, np.ndarray]:
        av = load_av()
        want = set(int(i) for i in wanted)
        if not want:
            return {}
        if min(want) < 0 or max(want) >= clip.frames:
            raise Malformed(f"{what}: frame {max(want)} of a clip of {clip.frames}")
        start = clip.start_for(min(want))
        frame = start
        out: dict[int, np.ndarray] = {}
        context, convert = self._context(clip)
        height, width = size if size is not None else (clip.height, clip.width)
        try:
            for packet in [*clip.packets[start:], None]:
                for decoded in context.decode(av.Packet(packet) if packet is not None else None):
                    self.decoded += 1
                    if decoded.is_corrupt:  # the decoder concealed damage: wrong pixels, not ours to give
                        raise Malformed(f"{what}: frame {frame} of its {clip.codec} clip is damaged (the decoder "
                                        "found errors in its bitstream). The recording or the pack is corrupt")
                    if frame in want:
                        if decoded.width != clip.width or decoded.height != clip.height:
                            raise Malformed(f"{what}: a frame decoded {decoded.width}x{decoded.height}, the clip "
                                            f"says {clip.width}x{clip.height}")
                        out[frame] = to_rgb(convert, decoded, width, height)
                        if len(out) == len(want):
                            return out
                    frame += 1
        except av.FFmpegError as e:
            raise Malformed(f"{what}: frame {frame} of its {clip.codec} clip does not decode "
                            f"({type(e).__name__}: {e})") from None
        finally:
            context.flush_buffers()
        raise Malformed(f"{what}: its clip decoded {frame} frames; frame {max(want)} was asked")

    def _context(self, clip: Clip) -> tuple[Any, Any]:
        kept: dict[tuple[str, bytes, int, int], tuple[Any, Any]] = self._kept.__dict__.setdefault("contexts", {})
        key = (clip.codec, bytes(clip.extradata), clip.height, clip.width)
        found = kept.get(key)
        if found is None:
            from av.video.reformatter import VideoReformatter

            if len(kept) >= 8:  # a pack's cameras share a few; a hostile pack could name many
                kept.clear()
            found = kept[key] = (decoder_context(clip.codec, clip.extradata, self.threads, (clip.height, clip.width)),
                                 VideoReformatter())
        return found


def decoder_context(codec: str, extradata: bytes = b"", threads: int = 1, size: tuple[int, int] | None = None) -> Any:
    """A PyAV decoder context for ``codec``: the fastest decoder FFmpeg has for it. ``size``
    (height, width), the frames' size as the schema says: FFmpeg refuses a bitstream that
    declares larger ones before it allocates them (``max_pixels``), so a clip whose header
    lies costs no memory beyond the size the pack was checked for."""
    av = load_av()
    for name in DECODERS[codec]:
        try:
            context = av.CodecContext.create(name, "r")
        except (av.FFmpegError, ValueError):  # ValueError: PyAV's unknown codec
            continue
        context.thread_count = threads
        if extradata:
            context.extradata = extradata
        if size is not None:  # a decoder allocates its coded size: whole macroblocks, CTBs, superblocks
            context.options = {**STRICT, "max_pixels": str(-(-size[0] // 128) * 128 * (-(-size[1] // 128) * 128))}
        else:
            context.options = dict(STRICT)
        return context
    raise InvalidInput(f"no {codec} decoder in this FFmpeg (PyAV {av.__version__}); install a PyAV built with one")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images (or stacks of them), in dB."""
    if a.shape != b.shape:
        raise ValueError(f"psnr of arrays of different shapes: {a.shape} and {b.shape}")
    x, y = a.reshape(-1), b.reshape(-1)
    squared = 0
    for start in range(0, x.size, 1 << 22):  # in pieces: a float copy of a whole epoch's frames would not fit
        d = x[start:start + (1 << 22)].astype(np.int64) - y[start:start + (1 << 22)]
        squared += int(np.dot(d, d))
    return float("inf") if squared == 0 else float(10 * np.log10(255.0**2 * x.size / squared))


def to_rgb(convert: Any, frame: Any, width: int | None = None, height: int | None = None) -> np.ndarray:
    """A decoded frame as ``(H, W, 3) uint8`` RGB (scaled to ``width`` x ``height`` in the same
    pass) through ``convert``, a ``VideoReformatter`` kept for a run of frames: one swscale
    context for them all, not one a frame.

    One swscale thread: the processes (a DataLoader's workers, a pack's) are the parallelism.
    Its automatic pool took 0.111 ms of CPU a 224x224 frame against 0.031 on one thread, and a
    converter with a pool never returns in a process forked after it was used."""
    rgb: np.ndarray = convert.reformat(frame, format="rgb24", width=width, height=height,
                                       interpolation="BILINEAR", threads=1).to_ndarray()
    return rgb


def load_av() -> Any:
    """PyAV, or an error saying how to install it."""
    try:
        import av
    except ImportError:
        raise InvalidInput("video needs PyAV: pip install 'rayform[video]'") from None
    return av
