"""Every video codec rayform stores, in one table: what decodes it (fastest first), what
encodes it and how (quality scale, default and range, preset), and what a browser is told it
is. Every place that handles a codec reads this table (``tests/codec/test_codecs.py`` holds
each to it); adding a codec is a row here and the steps in docs/design.md, "Adding a codec"."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VideoCodecInfo:
    name: str  # as stored in a segment's or pack's schema, and given to ``--codec``
    decoders: tuple[str, ...]  # FFmpeg decoders, the fastest first: the first one installed decodes
    encoder: str  # FFmpeg encoder a pack encodes with
    crf: int  # default constant rate factor (the encoder's quality scale: lower is better)
    crf_range: tuple[int, int]  # what ``--psnr`` searches between
    crf_step: float  # the finest CRF the encoder takes (x264 and x265 take fractions, SVT-AV1 whole numbers)
    preset: str  # the encoder's speed/size preset
    browser: str  # the RFC 6381 codecs string of an MP4 served to a browser (``rayform view``)


VIDEO: dict[str, VideoCodecInfo] = {c.name: c for c in (
    VideoCodecInfo("h264", ("h264",), "libx264", 18, (10, 40), 0.5, "medium", "avc1.640028"),
    VideoCodecInfo("av1", ("libdav1d", "av1"), "libsvtav1", 28, (15, 55), 1, "8", "av01.0.08M.08"),
    VideoCodecInfo("hevc", ("hevc",), "libx265", 18, (10, 40), 0.5, "medium", "hvc1.1.6.L120.90"),
)}
VIDEO_CODECS = tuple(VIDEO)
# A pack's default quality for each camera it encodes: the largest CRF (within the codec's
# crf_range, in its crf_step) whose PSNR on the camera's sampled clips is this far below JPEG
# q90's on the same frames (``packer.quality``); ``crf`` above is where a clip is encoded without
# that measure. 1.4 dB: every pack measured is within 1.5 dB over all its frames (the sample is
# a few clips), at the fewest bytes that keep it (the G1 camera at 10 fps: 0.176x JPEG's bytes,
# 0.212x at 1.25 dB in whole CRF steps; ``benchmarks/video.py --quality-only --rates 10,15,30``).
JPEG_DISTANCE_DB = 1.4


def crf_value(codec: str, crf: object) -> int | float:
    """``crf`` checked for ``codec`` (a number 0..63 in its ``crf_step``), as an int where whole
    (so a pack's key is the same for 18 and 18.0); ``ValueError`` naming the range otherwise."""
    step = VIDEO[codec].crf_step
    if not isinstance(crf, (int, float)) or isinstance(crf, bool) or not 0 <= crf <= 63 \
            or not float(crf / step).is_integer():
        raise ValueError(f"video crf {str(crf)[:20]}: a number 0..63" + (f" in steps of {step:g}" if step != 1 else
                                                                          ", whole") + f" for {codec}")
    return int(crf) if float(crf).is_integer() else float(crf)
