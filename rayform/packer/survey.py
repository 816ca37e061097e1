"""A slice surveyed for packing, in one pass over its segments: each one's plan
(``plan.plan_segment``) and what the pack's schema needs to know of it, then let go.

A slice of a million episodes is never held as a million open segments: each segment is
read (its manifest and timestamps, out of its bundle, ``store.bundle``), planned, checked
against the first one's streams and folded into the facts that decide its cameras' video
(``camera_codec.VideoFacts``), and only its plan is kept. Where no streams are named, a
first pass reads only the manifests, for the streams every segment has.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from rayform.errors import InvalidInput
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer.camera_codec import VideoFacts
from rayform.packer.plan import SegmentPlan, plan_segment
from rayform.packer.render import member_format
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice
from rayform.recordings.streams import StreamInfo
from rayform.untrusted import mapping


@dataclass
class Survey:
    spec: PackSpec  # with the streams resolved
    plans: list[SegmentPlan]
    schema: dict[str, StreamSchema]


def survey(slice_: Slice, spec: PackSpec) -> Survey:
    """Every segment of ``slice_`` planned for ``spec``, and the pack's schema."""
    streams = tuple(spec.streams) if spec.streams else _common_streams(slice_)
    spec = dataclasses.replace(spec, streams=streams)
    check = _SchemaCheck(spec)
    plans = []
    for i, sel in enumerate(slice_.segments):
        seg = slice_.segment(i)
        for name in streams:
            seg.stream(name)  # StreamNotFound names the segment and what it has
        plan = plan_segment(i, seg, sel, spec)
        check.add(seg, plan)
        plans.append(plan)
    return Survey(spec, plans, check.schema())


def _common_streams(slice_: Slice) -> tuple[str, ...]:
    """The streams every segment of the slice has: the catalog's stream names of the versions
    it lists, the manifests of the others (a store from before catalogs, a slice of versions
    the catalog lost)."""
    segments = Segments(slice_.store)
    listed = slice_.segments
    counts, unlisted = segments.catalog.stream_counts(listed.versions())
    common: set[str] | None = {n for n, c in counts.items() if c == len(listed) - int(unlisted.sum())} \
        if not unlisted.all() else None
    for i in np.flatnonzero(unlisted).tolist():
        s = listed[i]
        manifest, _ = segments.manifest(s.id, s.version, s.bundle)
        names = set(mapping(manifest.get("streams"), f"segment manifest of {s.id}"))
        common = names if common is None else common & names
    if not common:
        raise InvalidInput("slice: its segments share no stream; name the streams to pack")
    return tuple(sorted(common))


class _SchemaCheck:
    """The pack's schema, from the first segment's streams, every other one checked against it
    as it comes (kind; shape, unless images are resized), and the cameras' video facts."""

    def __init__(self, spec: PackSpec):
        self.spec = spec
        self.first: dict[str, StreamInfo] = {}
        self.first_id = ""
        self.video = {name: VideoFacts(name, spec) for name in spec.streams or ()}

    def add(self, seg: Segment, plan: SegmentPlan) -> None:
        if not self.first:
            self.first, self.first_id = {n: seg.streams[n] for n in self.spec.streams or ()}, seg.id
        for name, info in self.first.items():
            other = seg.streams[name]
            if other.kind != info.kind:
                raise InvalidInput(f"stream {name}: {info.kind} in {self.first_id} but {other.kind} in {seg.id}")
            if other.shape != info.shape and not (info.is_image and self.spec.resize):
                raise InvalidInput(
                    f"stream {name}: shape {info.shape} in {self.first_id} but {other.shape} in {seg.id}; "
                    + ("pack with a resize" if info.is_image else "they cannot share a pack"))
            if info.is_image:
                self.video[name].add(seg, plan)

    def schema(self) -> dict[str, StreamSchema]:
        out = {}
        spec = self.spec
        for name, info in self.first.items():
            member = name.replace("/", ".")
            if info.is_image:
                shape = info.shape if not spec.resize else tuple(spec.resize) + tuple(info.shape[2:])
                video = self.video[name].schema(info)
                fmt = "clip" if video is not None else member_format(info.encoding or "raw", info.dtype, spec)
                out[name] = StreamSchema(name, "image", f"{member}.{fmt}", info.dtype, shape, video=video)
            else:
                out[name] = StreamSchema(name, info.kind, member, info.dtype, info.shape, info.units, info.names,
                                         info.frame)
        return out
