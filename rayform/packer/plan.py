"""Planning a pack: which instants of which segment become samples, and the tasks.

Pure given the timestamps: the plan of a slice is the same in every process, which is
what makes the shards identical whatever executor renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rayform.pack.spec import PackSpec
from rayform.packer import align
from rayform.recordings.segment_reader import Segment
from rayform.recordings.slices import SliceSegment


@dataclass(frozen=True)
class SegmentPlan:
    """The samples one segment contributes: grid instants kept, and what was dropped."""

    position: int  # the segment's place in the slice
    segment_id: str
    version: str
    site: str
    times: np.ndarray  # int64 instants kept, increasing
    grid_index: np.ndarray  # their k on the segment's grid
    instants: int  # instants on the grid before any was dropped
    dropped: dict[str, int]  # per stream: instants it made stale
    end_ns: int  # where future windows stop: the slice's end of the segment, if it has one
    bundle: str | None = None  # the bundle holding its manifest and small arrays (None: loose)

    @property
    def dropped_instants(self) -> int:
        return self.instants - len(self.times)


@dataclass(frozen=True)
class Task:
    """A contiguous run of one segment's samples, rendered by one worker."""

    position: int
    version: str
    start: int  # first sample of the run within the segment's plan
    times: np.ndarray
    grid_index: np.ndarray
    bundle: str | None = None  # the segment's bundle (``SegmentPlan.bundle``)


def plan_segment(position: int, seg: Segment, sel: SliceSegment, spec: PackSpec) -> SegmentPlan:
    streams = spec.streams or ()
    stamps = {name: seg.timestamps(name) for name in streams}
    snaps = {name: align.snap_ns(ts, spec.snap) for name, ts in stamps.items()}
    start = max(int(ts[0]) for ts in stamps.values())
    end = min(int(ts[-1]) + snaps[name] for name, ts in stamps.items())
    if sel.start_ns is not None:
        start = max(start, sel.start_ns)
    if sel.end_ns is not None:
        end = min(end, sel.end_ns)
    t = align.grid(start, end, spec.fps)
    keep = np.ones(len(t), bool)
    dropped: dict[str, int] = {}
    for name, ts in stamps.items():
        info = seg.streams[name]
        tolerance = int(spec.staleness * align.median_period_ns(ts))
        if info.is_image:
            _, ok = align.image_indices(ts, t, tolerance, snaps[name])
        else:
            ok = align.array_ok(ts, t, tolerance, snaps[name])
        dropped[name] = int(np.count_nonzero(~ok))
        keep &= ok
    k = np.flatnonzero(keep)
    # Future windows run on to each stream's own last value (or the slice's end): the
    # arrays recorded after the last camera frame are real data, not padding.
    window_end = sel.end_ns if sel.end_ns is not None else np.iinfo(np.int64).max
    return SegmentPlan(position, seg.id, seg.version, seg.site, t[k], k.astype(np.int64), len(t), dropped,
                       int(window_end), seg.bundle.digest if seg.bundle is not None else None)


def tasks_of(plan: SegmentPlan, samples_per_task: int) -> list[Task]:
    return [
        Task(plan.position, plan.version, i, plan.times[i : i + samples_per_task],
             plan.grid_index[i : i + samples_per_task], plan.bundle)
        for i in range(0, len(plan.times), samples_per_task)
    ]
