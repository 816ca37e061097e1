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

from rayform.codec.codecs import VIDEO_CODECS
from rayform.codec.video_encoder import VideoCodec
from rayform.errors import Malformed
from rayform.pack.layout import VideoSchema
from rayform.pack.spec import PackSpec
from rayform.packer.clips import frame_indices
from rayform.packer.plan import SegmentPlan
from rayform.recordings.segment_reader import Segment
from rayform.recordings.streams import StreamInfo


class VideoFacts:
    """How camera ``name`` is packed as video (``schema``; None: as images), decided from its
    segments as they come (``add``): whether every one keeps its packets where the pack's
    samples want them, and their codecs and keyframe gaps."""

    def __init__(self, name: str, spec: PackSpec):
        self.name, self.spec = name, spec
        self.any_video = False
        self.why: str | None = f"resized to {spec.resize[1]}x{spec.resize[0]}" if spec.resize is not None else None
        self.codecs: set[str] = set()
        self.gap = 0
        self.kept_bytes = self.kept_samples = 0  # what keeping would copy, clips' lead-ins included
        self.trials: list[tuple[Segment, np.ndarray]] = []  # a few segments' clips, to encode and compare

    def add(self, seg: Segment, plan: SegmentPlan) -> None:
        info = seg.streams[self.name]
        self.any_video |= info.video is not None
        if self.spec.image_codec != "keep":
            return
        if info.video is None:
            self.why = self.why or f"recorded as {info.encoding} frames in {seg.id}"
            return
        self.codecs.add(info.video.codec)
        stored = seg.video(self.name)
        gap = stored.keyframe_gap()
        self.gap = max(self.gap, gap)
        if self.why is not None:
            return
        # the frame each sample shows: what the grid check and the bytes a copy costs both read
        shows = frame_indices(seg, self.name, self.spec, plan.times, np.zeros((len(plan.times), 0), np.int64))[:, 0] \
            if len(plan.times) else np.zeros(0, np.int64)
        self.why = _why_not_kept(seg, info, gap, shows, self.spec)
        if self.why is None and len(shows):
            sizes = seg.frame_sizes(self.name)
            for first in range(0, len(shows), self.spec.clip_frames):  # the packets each clip would copy
                at = shows[first:first + self.spec.clip_frames]
                start, end = stored.start_packet(int(at.min())), int(stored.frame_packet[int(at.max())]) + 1
                self.kept_bytes += int(sizes[start:end].sum())
            self.kept_samples += len(shows)
            if len(self.trials) < TRIALS:
                self.trials.append((seg, shows[:self.spec.clip_frames]))

    def schema(self, first: StreamInfo) -> VideoSchema | None:
        spec = self.spec
        rgb = first.dtype == "|u1" and tuple(first.shape[2:]) == (3,)
        if spec.image_codec in VIDEO_CODECS:
            return _encoded(spec.image_codec, spec, None) if rgb else None
        if spec.image_codec != "keep" or not self.any_video:
            return None
        why = self.why or (f"recorded as {' and '.join(sorted(self.codecs))} in different segments"
                           if len(self.codecs) > 1 else None) or self._costlier()
        if why is None:
            video = first.video
            assert video is not None
            return VideoSchema(video.codec, spec.clip_frames, kept=True, gop=self.gap)
        return _encoded("h264", spec, why)

    def _costlier(self) -> str | None:
        """Why keeping the recorded packets would cost more bytes than encoding them (None: it
        would not): a clip copies the packets from the keyframe before its first frame, so a
        recording whose keyframes fall elsewhere than the clips' starts is copied over and over.
        Measured: the bytes keeping copies against a few clips encoded as H.264 would be."""
        if not self.kept_samples or not self.trials:
            return None
        settings = VideoCodec("h264", self.spec.video_crf, self.spec.video_preset, self.spec.keyframe_every)
        encoded = frames = 0
        for seg, shows in self.trials:
            try:
                clip = settings.encode([seg.video(self.name).frame(int(i)) for i in shows])
            except Malformed:  # a damaged recording: reading it says so (rayform verify --decode)
                continue
            encoded += clip.nbytes
            frames += len(shows)
        if not frames:
            return None
        kept, anew = self.kept_bytes / self.kept_samples, encoded / frames
        if kept <= anew:
            return None
        return (f"keeping its packets copies {kept / 1024:.1f} KiB a sample against {anew / 1024:.1f} encoded "
                f"(keyframes up to {self.gap} frames apart, not at the clips' starts)")


TRIALS = 3  # segments whose first clip is encoded to weigh keeping a camera's packets against encoding them


def _encoded(codec: str, spec: PackSpec, why: str | None) -> VideoSchema:
    settings = VideoCodec(codec, spec.video_crf, spec.video_preset, spec.keyframe_every)
    return VideoSchema(codec, spec.clip_frames, False, settings.crf, settings.preset, why, gop=spec.group_frames())


def _why_not_kept(seg: Segment, info: StreamInfo, gap: int, shows: np.ndarray, spec: PackSpec) -> str | None:
    """Why one segment's recorded packets (a video stream ``info``, keyframes up to ``gap``
    frames apart, its samples showing frames ``shows``) cannot be the pack's clips (None: they
    can)."""
    assert info.video is not None
    if info.video.reorders:
        return f"its packets are reordered (B-frames) in {seg.id}"
    if gap > spec.keyframe_every:
        return (f"its keyframes are up to {gap} frames apart in {seg.id} (a pack's are {spec.keyframe_every} "
                "apart, so a frame decodes in a few)")
    if len(shows) > 1:
        steps = np.diff(shows)
        if np.any(steps != 1):
            skipped = "skips frames" if np.any(steps > 1) else "shows frames twice"
            return f"at {spec.fps:g} fps the pack's grid {skipped} of its video in {seg.id}"
    return None
