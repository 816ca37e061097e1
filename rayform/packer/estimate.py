"""How many tar bytes a sample of a pack takes, before the pack is rendered.

Shard boundaries must be known before any sample is rendered (so that every task can write
where its samples belong), so the samples per shard come from an estimate: the mean tar size
of a few samples rendered exactly as the pack will render them, spread evenly over the
slice's segments and over each one's instants. The estimate depends on the plan and the
segments' bytes only, so every process computes the same; shards are about ``shard_bytes``.
"""

from __future__ import annotations

import numpy as np

from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer.plan import SegmentPlan, Task
from rayform.packer.render import render_task
from rayform.packer.shards import BLOCK, padded
from rayform.store.cached import StoreRef

SEGMENTS = 8  # segments rendered from
PER_SEGMENT = 4  # instants rendered in each


def sample_bytes(store_ref: StoreRef, slice_id: str, spec: PackSpec, schema: dict[str, StreamSchema],
                 plans: list[SegmentPlan]) -> float:
    """The mean tar bytes of a sample of this pack, from up to ``SEGMENTS × PER_SEGMENT`` samples."""
    kept = [p for p in plans if len(p.times)]
    chosen = [kept[i] for i in np.unique(np.linspace(0, len(kept) - 1, min(SEGMENTS, len(kept))).round().astype(int))]
    sizes = []
    for plan in chosen:
        k = np.unique(np.linspace(0, len(plan.times) - 1, min(PER_SEGMENT, len(plan.times))).round().astype(int))
        task = Task(plan.position, plan.version, 0, plan.times[k], plan.grid_index[k])
        for _key, members in render_task(store_ref, plan.segment_id, slice_id, spec, schema,
                                        (int(plan.times[0]), plan.end_ns), task):
            sizes.append(sum(BLOCK + padded(len(data)) for data in members.values()))
    return float(np.mean(sizes)) if sizes else float(BLOCK)
