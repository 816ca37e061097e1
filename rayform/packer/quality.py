"""How good a pack's encoded video is, measured before it is rendered, and the CRF a quality
target asks for.

For each camera a pack encodes, a few clips are taken as the pack will take them (a group of
pictures from the middle of each of up to ``SAMPLED`` segments spread over the slice: the
frames its samples show, resized as it resizes), encoded at the camera's CRF, decoded and
compared with the frames (PSNR, dB); the same frames as JPEG at quality 90 are the
comparison. With a target (``PackSpec.video_psnr``) the CRF is the largest that meets it on
those clips (a binary search in the codec's CRF steps: PSNR falls as CRF rises), the fewest
bytes that keep the quality asked. Without a target or a CRF given, the target is the
camera's own: ``JPEG_DISTANCE_DB`` below JPEG q90's PSNR on its frames, so a
camera whose frames code easily is stored smaller and one whose frames do not keeps its
quality (one CRF for every camera missed that by 1.7 dB on one real camera, and spent bytes
on another). The figures and how the CRF was chosen go into the camera's schema, so ``show``
and ``rayform view`` say what a pack's video is worth against JPEG.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np

from rayform.codec import imagecodec
from rayform.codec.codecs import JPEG_DISTANCE_DB, VIDEO, crf_value
from rayform.codec.video import PyAVDecoder, psnr
from rayform.codec.video_encoder import VideoCodec
from rayform.pack.layout import StreamSchema, VideoSchema
from rayform.pack.spec import PackSpec
from rayform.packer.clips import frame_indices
from rayform.packer.plan import SegmentPlan
from rayform.recordings.segment_reader import Segment

log = logging.getLogger("rayform.pack")
SAMPLED = 8  # segments a camera's clips are sampled from


def measured(schema: dict[str, StreamSchema], plans: list[SegmentPlan], spec: PackSpec,
             segment: Callable[[int], Segment]) -> dict[str, StreamSchema]:
    """``schema`` with each encoded camera's PSNR (and JPEG q90's) measured, and its CRF chosen
    where ``spec.video_psnr`` asks for a quality; ``segment(i)`` opens the slice's segment ``i``."""
    out = dict(schema)
    kept = [p for p in plans if len(p.times)]
    chosen = [kept[int(i)] for i in np.unique(np.linspace(0, len(kept) - 1, min(SAMPLED, len(kept))).round())] \
        if kept else []
    for name, s in schema.items():
        video = s.video
        if video is None or video.kept or not chosen:
            continue
        frames = [_frames(segment(p.position), name, p, spec) for p in chosen]
        jpeg = psnr(np.concatenate(frames), np.concatenate([_jpeg(f) for f in frames]))
        if spec.video_crf is not None:
            crf, by = video.crf, "given"
            quality = _psnr(video, frames, spec)
        else:
            target = float(spec.video_psnr) if spec.video_psnr is not None else jpeg - JPEG_DISTANCE_DB
            crf, quality = _crf_for(video, frames, spec, target)
            by = f"a PSNR of {target:g} dB" if spec.video_psnr is not None else f"JPEG q90 − {JPEG_DISTANCE_DB:g} dB"
        if spec.video_psnr is not None and quality < spec.video_psnr:
            log.warning("rayform: camera %s: %.1f dB at crf %g, the best tried, is short of the %.1f dB asked "
                        "(JPEG q90 measures %.1f on the same frames)", name, quality, crf, spec.video_psnr, jpeg)
        out[name] = dataclasses.replace(s, video=dataclasses.replace(video, crf=crf, psnr=round(quality, 2),
                                                                     jpeg_psnr=round(jpeg, 2), crf_by=by))
    return out


def _frames(seg: Segment, name: str, plan: SegmentPlan, spec: PackSpec) -> np.ndarray:
    """The frames one group of pictures in the middle of this segment shows, as the pack takes
    them (its first is often the robot at rest: easier to code than the episode)."""
    k = spec.keyframe_every
    middle = len(plan.times) // 2 // k * k
    t = plan.times[middle:middle + k]
    shows = frame_indices(seg, name, spec, t, np.zeros((len(t), 0), np.int64))[:, 0]
    out = []
    for i in shows.tolist():
        image = seg.frame_array(name, int(i))
        if spec.resize is not None and tuple(image.shape[:2]) != spec.resize:
            image = imagecodec.resize(image, spec.resize)
        out.append(image)
    return np.stack(out)


def _jpeg(frames: np.ndarray) -> np.ndarray:
    return np.stack([imagecodec.decode_jpeg(imagecodec.encode_jpeg(f, 90)) for f in frames])


def _psnr(video: VideoSchema, clips: list[np.ndarray], spec: PackSpec) -> float:
    codec = VideoCodec(video.codec, video.crf, video.preset, spec.keyframe_every)
    decoder = PyAVDecoder()
    decoded = []
    for frames in clips:
        clip = codec.encode(list(frames))
        got = decoder.decode(clip, range(clip.frames), None, "quality sample")
        decoded.append(np.stack([got[i] for i in range(clip.frames)]))
    return psnr(np.concatenate(clips), np.concatenate(decoded))


def _crf_for(video: VideoSchema, clips: list[np.ndarray], spec: PackSpec, target: float) -> tuple[int | float, float]:
    """The largest CRF (in the codec's steps) whose PSNR on ``clips`` meets ``target`` (the
    smallest tried if none does), and its PSNR."""
    info = VIDEO[video.codec]
    lo, hi = round(info.crf_range[0] / info.crf_step), round(info.crf_range[1] / info.crf_step)
    measured: dict[int, float] = {}

    def quality(k: int) -> float:
        if k not in measured:
            measured[k] = _psnr(dataclasses.replace(video, crf=crf_value(video.codec, k * info.crf_step)), clips, spec)
        return measured[k]

    best = lo
    while lo <= hi:
        mid = (lo + hi) // 2
        if quality(mid) >= target:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return crf_value(video.codec, best * info.crf_step), quality(best)
