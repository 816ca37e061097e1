"""Rendering a video pack's samples: one ``clips.mp`` member per clip of samples.

A task's samples are cut into clips of ``clip_frames`` consecutive samples (tasks and runs
start on a clip's first sample, ``packer.driver``). The clip's first sample carries its
``clips.mp`` (``pack.layout``); the others an empty member, which the shard writer points at
the first's. It holds, per video camera, the clip of every frame its samples show, now or as
history, in time order; and the clip's record: what a JPEG pack's records hold per sample,
held once for the clip. Array values are kept once per grid step the clip's samples read
(``rows``: from ``max_history`` steps before the first sample to ``max_horizon`` after the
last), not once per sample and step (17 times each, at horizon 16).

A camera's clip is either the recorded packets copied (``kept``: from the keyframe at or
before its first frame, so it decodes alone; not one pixel re-encoded) or the frames encoded
(``codec.video_encoder``), resized first where the pack resizes: one group of pictures, or
with ``gop_frames`` a keyframe every that many samples, the first group also holding the
frames the first sample's history shows (so a clip of 64 samples with 4 steps of history
stores 68 frames and 8 keyframes, where clips of 8 without history store 64 and 8).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rayform.codec import imagecodec, records
from rayform.codec.clip import Clip
from rayform.codec.video_encoder import VideoCodec
from rayform.pack import grid as pack_grid
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer import align
from rayform.recordings.segment_reader import Segment


def frame_indices(seg: Segment, name: str, spec: PackSpec, t: np.ndarray, back: np.ndarray) -> np.ndarray:
    """``(samples, 1 + max_history)``: the recorded frame each sample shows now, then at each
    step back (``back``: the history instants, held at the segment's first sample)."""
    ts = seg.timestamps(name)
    snap = align.snap_ns(ts, spec.snap)
    return np.stack([align.latest_at_or_before(ts, when, snap) for when in [t, *back.T]], axis=1)


def render_clip_docs(seg: Segment, spec: PackSpec, schema: dict[str, StreamSchema], grid: np.ndarray,
                     t: np.ndarray, back: np.ndarray, span: tuple[int, int],
                     base: dict[str, Any]) -> tuple[list[bytes], dict[str, int]]:
    """The ``clips.mp`` of each clip of samples at ``t`` (grid steps ``grid``; whole clips,
    the first a clip's first), and each camera's bytes of video in them: ``base`` is the
    record's fields every sample shares."""
    video_bytes: dict[str, int] = {}
    videos = {name: s for name, s in schema.items() if s.video is not None}
    arrays = {name: s for name, s in schema.items() if s.kind != "image"}
    frames = {name: frame_indices(seg, name, spec, t, back) for name in videos}
    origin = pack_grid.origin(int(t[0]), int(grid[0]), spec.fps)
    start_ns, end_ns = span
    out = []
    for first in range(0, len(t), spec.clip_frames):
        at = slice(first, first + spec.clip_frames)
        rows_from = int(grid[at][0]) - spec.max_history
        steps = np.arange(rows_from, int(grid[at][-1]) + spec.max_horizon + 1, dtype=np.int64)
        when = pack_grid.instants(origin, steps, spec.fps)
        record: dict[str, Any] = {**base, "samples": len(t[at]), "t_ns": t[at].tolist(), "index": grid[at].tolist(),
                                  "rows_from": rows_from, "arrays": {}, "frames": {}}
        for name, s in arrays.items():
            ts = seg.timestamps(name)
            end = min(end_ns, int(ts[-1]))
            # as a JPEG pack's records: past held at the first sample, future at the end
            values = align.interpolate(ts, seg.values(name), np.clip(when, start_ns, end), s.kind)
            pad = when > end + align.snap_ns(ts, spec.snap)
            record["arrays"][name] = {"values": records.pack_array(values), "pad": records.pack_array(pad)}
        if spec.max_history:
            record["history_pad"] = records.pack_array(when < start_ns)
        clips = {}
        for name, s in videos.items():
            clip, where = _clip(seg, name, s, spec, frames[name][at])
            clips[name] = clip.to_doc()
            video_bytes[name] = video_bytes.get(name, 0) + clip.nbytes
            record["frames"][name] = records.pack_array(where.astype(np.int32))
        out.append(records.dumps({"record": record, "video": clips}))
    return out, video_bytes


def _clip(seg: Segment, name: str, s: StreamSchema, spec: PackSpec, shows: np.ndarray) -> tuple[Clip, np.ndarray]:
    """Camera ``name``'s clip of recorded frames ``shows`` (per sample, now then back), and
    where each of them is in it."""
    video = s.video
    assert video is not None
    shown = np.unique(shows)
    if video.kept:
        stored = seg.video(name)
        clip, start = stored.clip(int(shown[0]), int(shown[-1]))
        return clip, stored.frame_packet[shows] - start
    codec = VideoCodec(video.codec, video.crf, video.preset, spec.keyframe_every)
    where = np.searchsorted(shown, shows)
    # a keyframe at the clip's first frame (its first sample's history, if any, before it in the
    # same group) and at the frame each keyframe_every-th sample shows: history read across a
    # group's edge decodes the group before, inside the clip
    starts = where[spec.keyframe_every::spec.keyframe_every, 0]
    return codec.encode([_frame(seg, name, int(i), spec) for i in shown], starts.tolist()), where


def _frame(seg: Segment, name: str, index: int, spec: PackSpec) -> np.ndarray:
    image = seg.frame_array(name, index)
    if spec.resize is not None and tuple(image.shape[:2]) != spec.resize:
        image = imagecodec.resize(image, spec.resize)
    return image
