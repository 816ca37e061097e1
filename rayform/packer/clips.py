"""Rendering a video camera's samples: each clip of a task, and every sample's frames in it.

A task's samples are cut into clips of ``clip_frames`` consecutive samples (tasks and runs
start on a clip's first sample, ``packer.driver``). A clip holds each frame its samples show
once, now or as history, in time order; its first sample carries it (``<stream>.clip``), the
others an empty member (the shard writer points them at the first's), and every sample's
record names its frames in the clip: now, then 1 … max_history steps back.

A clip is either the recorded packets copied (``kept``: from the keyframe at or before its
first frame, so it decodes alone; not one pixel re-encoded) or the frames encoded
(``codec.video_encoder``), resized first where the pack resizes.
"""

from __future__ import annotations

import numpy as np

from rayform.codec import imagecodec
from rayform.codec.video_encoder import VideoCodec
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer import align
from rayform.packer.tar_writer import Buffer
from rayform.recordings.segment_reader import Segment


def frame_indices(seg: Segment, name: str, spec: PackSpec, t: np.ndarray, back: np.ndarray) -> np.ndarray:
    """``(samples, 1 + max_history)``: the recorded frame each sample shows now, then at each
    step back (``back``: the history instants, held at the segment's first sample)."""
    ts = seg.timestamps(name)
    snap = align.snap_ns(ts, spec.snap)
    return np.stack([align.latest_at_or_before(ts, when, snap) for when in [t, *back.T]], axis=1)


def render_clips(seg: Segment, name: str, s: StreamSchema, spec: PackSpec, t: np.ndarray, back: np.ndarray
                 ) -> tuple[list[Buffer], list[list[int]]]:
    """For samples at ``t`` (whole clips, the first a clip's first): each one's ``.clip`` member
    (the clip in a clip's first sample, empty in the others) and its frames in its clip."""
    video = s.video
    assert video is not None
    idx = frame_indices(seg, name, spec, t, back)
    codec = None if video.kept else VideoCodec(video.codec, video.crf, video.preset, video.clip_frames)
    members: list[Buffer] = []
    frames: list[list[int]] = []
    for first in range(0, len(t), video.clip_frames):
        block = idx[first:first + video.clip_frames]
        shown = np.unique(block)
        if codec is None:
            stored = seg.video(name)
            clip, start = stored.clip(int(shown[0]), int(shown[-1]))
            where = stored.frame_packet[block] - start
        else:
            clip = codec.encode([_frame(seg, name, int(i), spec) for i in shown], spec.fps)
            where = np.searchsorted(shown, block)
        members += [clip.to_bytes(), *[b""] * (len(block) - 1)]
        frames += where.tolist()
    return members, frames


def _frame(seg: Segment, name: str, index: int, spec: PackSpec) -> np.ndarray:
    image = seg.frame_array(name, index)
    if spec.resize is not None and tuple(image.shape[:2]) != spec.resize:
        image = imagecodec.resize(image, spec.resize)
    return image
