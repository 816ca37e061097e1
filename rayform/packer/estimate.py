"""How many tar bytes a sample of a pack takes, before the pack is rendered.

Shard boundaries must be known before any sample is rendered (so that every task can write
where its samples belong), so the samples per shard come from an estimate, made from up to
``SEGMENTS`` segments spread evenly over the slice: for a camera kept as recorded, the mean
size of those segments' recorded frames; for the rest (records, re-encoded frames), the mean
size of ``PER_SEGMENT`` samples of each rendered exactly as the pack renders them; for a video
camera, each segment's first clip rendered, over its samples. The
estimate depends on the plan and the segments' bytes only, so every process computes the
same; shards are about ``shard_bytes``.
"""

from __future__ import annotations

import numpy as np

from rayform.cache.store_view import StoreRef
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer.plan import SegmentPlan, Task
from rayform.packer.render import as_recorded, open_segment, render_task
from rayform.packer.tar_writer import BLOCK, padded

SEGMENTS = 8
PER_SEGMENT = 4


def sample_bytes(store_ref: StoreRef, slice_id: str, spec: PackSpec, schema: dict[str, StreamSchema],
                 plans: list[SegmentPlan]) -> float:
    """The mean tar bytes of a sample of this pack."""
    kept = [p for p in plans if len(p.times)]
    chosen = [kept[i] for i in np.unique(np.linspace(0, len(kept) - 1, min(SEGMENTS, len(kept))).round().astype(int))]
    per_segment = []
    for plan in chosen:
        seg = open_segment(store_ref, plan.version, plan.segment_id, plan.bundle)
        recorded = {n for n, s in schema.items() if s.kind == "image" and s.video is None and
                    as_recorded(seg, n, s, spec)}
        frames = sum((1 + spec.max_history) * float(np.mean(BLOCK + padded(seg.frame_sizes(n))))
                     for n in recorded)
        if any(s.video is not None for s in schema.values()):  # a clip's samples, as rendered
            clip = render_task(store_ref, plan.segment_id, slice_id, spec, schema, (int(plan.times[0]), plan.end_ns),
                               Task(plan.position, plan.version, 0, plan.times[:spec.clip_frames],
                                    plan.grid_index[:spec.clip_frames], plan.bundle))
            per_segment.append(float(np.mean([sum(BLOCK + padded(len(data)) for data in members.values() if len(data))
                                              for _, members in clip.samples])))
            continue
        k = np.unique(np.linspace(0, len(plan.times) - 1, min(PER_SEGMENT, len(plan.times))).round().astype(int))
        rendered = render_task(store_ref, plan.segment_id, slice_id, spec,
                               {n: s for n, s in schema.items() if n not in recorded},
                               (int(plan.times[0]), plan.end_ns),
                               Task(plan.position, plan.version, 0, plan.times[k], plan.grid_index[k], plan.bundle))
        rest = np.mean([sum(BLOCK + padded(len(data)) for data in members.values())
                        for _, members in rendered.samples])
        per_segment.append(frames + float(rest))
    return float(np.mean(per_segment)) if per_segment else float(BLOCK)

