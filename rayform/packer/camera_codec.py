"""Which cameras a pack holds as video, and how: decided once, before rendering, from the
plan and the recorded streams (no frame decoded), and written into the pack's schema.

- ``--codec h264|av1|hevc``: every RGB camera (``(H, W, 3) uint8``) is encoded as clips.
  Depth and other images keep their image format.
- ``--codec keep`` (the default): a camera recorded as video is copied packet for packet
  where that gives the pack's samples exactly: no resize, packets in display order (no
  B-frames), keyframes at most a clip apart (so a clip's lead-in from its keyframe is short),
  one codec in every segment, and its frames falling one per sample on the pack's grid (none
  skipped, none shown twice). Otherwise it is encoded as H.264, and the schema says why.
"""

from __future__ import annotations

import numpy as np

from rayform.codec.video_encoder import VideoCodec
from rayform.pack.layout import VideoSchema
from rayform.pack.spec import VIDEO_CODECS, PackSpec
from rayform.packer.clips import frame_indices
from rayform.packer.plan import SegmentPlan
from rayform.recordings.segment_reader import Segment


def video_schema(name: str, segments: list[Segment], plans: list[SegmentPlan], spec: PackSpec) -> VideoSchema | None:
    """How stream ``name`` (an image stream of every segment) is packed as video; None: as images."""
    info = segments[0].streams[name]
    rgb = info.dtype == "|u1" and tuple(info.shape[2:]) == (3,)
    if spec.image_codec in VIDEO_CODECS:
        return _encoded(spec.image_codec, spec, None) if rgb else None
    if spec.image_codec != "keep" or not any(seg.streams[name].is_video for seg in segments):
        return None
    why = _why_not_kept(name, segments, plans, spec)
    if why is None:
        video = segments[0].streams[name].video
        assert video is not None
        return VideoSchema(video.codec, spec.clip_frames, kept=True,
                           gop=max(seg.video(name).keyframe_gap() for seg in segments))
    return _encoded("h264", spec, why)


def _encoded(codec: str, spec: PackSpec, why: str | None) -> VideoSchema:
    settings = VideoCodec(codec, spec.video_crf, spec.video_preset, spec.clip_frames)
    return VideoSchema(codec, spec.clip_frames, False, settings.crf, settings.preset, why, gop=spec.clip_frames)


def _why_not_kept(name: str, segments: list[Segment], plans: list[SegmentPlan], spec: PackSpec) -> str | None:
    if spec.resize is not None:
        return f"resized to {spec.resize[1]}x{spec.resize[0]}"
    codecs = set()
    for seg, plan in zip(segments, plans):
        info = seg.streams[name]
        if info.video is None:
            return f"recorded as {info.encoding} frames in {seg.id}"
        codecs.add(info.video.codec)
        if info.video.reorders:
            return f"its packets are reordered (B-frames) in {seg.id}"
        stored = seg.video(name)
        gap = stored.keyframe_gap()
        if gap > spec.clip_frames:
            return f"its keyframes are up to {gap} frames apart in {seg.id} (a clip holds {spec.clip_frames})"
        if len(plan.times) > 1:
            now = frame_indices(seg, name, spec, plan.times, np.zeros((len(plan.times), 0), np.int64))[:, 0]
            steps = np.diff(now)
            if np.any(steps != 1):
                skipped = "skips frames" if np.any(steps > 1) else "shows frames twice"
                return f"at {spec.fps:g} fps the pack's grid {skipped} of its video in {seg.id}"
    if len(codecs) > 1:
        return f"recorded as {' and '.join(sorted(codecs))} in different segments"
    return None
