"""Rendering runs: the first half of packing, on any executor.

A run is a few consecutive tasks (runs of one segment's samples, in time order: what video
decoding and the renderer's caches want). The task that renders it knows where each of its
samples lies in the pack and which shard holds that place (``sharding.ShardLayout``, a pure
function of the plan), so it writes its samples to scratch already sorted into one section per
shard, and returns only where those sections are: no sample byte goes back to the driver.

It measures its samples' share of the pack's statistics from the arrays it rendered, too.

A section: an 8-byte little-endian length, then that many bytes of msgpack header
``{"positions": [...], "keys": [...], "sizes": npy (samples, members) int64}``, then every
sample's members (in sorted member order) back to back, in position order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rayform.cache.store_view import StoreRef
from rayform.codec import records
from rayform.errors import Malformed
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer.measure import RunStats, StatsPart
from rayform.packer.placement import ClipLayout, ShardLayout
from rayform.packer.plan import Task
from rayform.packer.render import render_task
from rayform.packer.scratch import Scratch, Section
from rayform.packer.tar_writer import Buffer


@dataclass(frozen=True)
class Piece:
    """One task of a run, and the rendering number of its first sample."""

    segment_id: str
    span: tuple[int, int]  # the segment's first sample instant, where its future windows stop
    task: Task
    first: int


@dataclass(frozen=True)
class RunJob:
    store_ref: StoreRef
    slice_id: str
    spec: PackSpec
    schema: dict[str, StreamSchema]
    members: tuple[str, ...]  # sorted
    layout: ShardLayout | ClipLayout
    scratch: Scratch
    pieces: tuple[Piece, ...]
    quantile_stride: int


@dataclass(frozen=True)
class RunResult:
    samples: int
    sections: dict[int, Section]  # shard -> its part of this run
    stats: StatsPart
    video_bytes: dict[str, int]  # per video camera: its clips' packet bytes


def render_run(job: RunJob) -> RunResult:
    keys: list[str] = []
    parts: list[list[Buffer]] = []
    positions = []
    stats = RunStats(job.schema, job.quantile_stride)
    video_bytes: dict[str, int] = {}
    # a run's pieces are consecutive in rendering order: their places in the pack, in one go
    first = job.pieces[0].first if job.pieces else 0
    places = job.layout.positions(first, first + sum(len(piece.task.times) for piece in job.pieces))
    for piece in job.pieces:
        rendered = render_task(job.store_ref, piece.segment_id, job.slice_id, job.spec, job.schema, piece.span,
                               piece.task)
        where = places[piece.first - first:piece.first - first + len(rendered.samples)]
        positions.append(where)
        stats.add(rendered.arrays, where)
        for name, n in rendered.video_bytes.items():
            video_bytes[name] = video_bytes.get(name, 0) + n
        for key, members in rendered.samples:
            keys.append(key)
            parts.append([members[m] for m in job.members])
    where = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    order = np.argsort(where, kind="stable")
    shard_of = job.layout.shard_of(where[order])
    sections: list[list[Buffer]] = []
    shards: list[int] = []
    counts: list[int] = []
    for group, shard in zip(np.split(order, np.flatnonzero(np.diff(shard_of)) + 1) if len(order) else [],
                            shard_of[np.r_[0, np.flatnonzero(np.diff(shard_of)) + 1]] if len(order) else []):
        shards.append(int(shard))
        counts.append(len(group))
        sections.append(_section(where[group], [keys[i] for i in group.tolist()], [parts[i] for i in group.tolist()]))
    run, offsets = job.scratch.write(sections)
    return RunResult(len(keys), {
        shard: Section(run, offset, sum(map(len, buffers)), n, _sha256(buffers) if job.scratch.verifies else "")
        for shard, offset, buffers, n in zip(shards, offsets, sections, counts)
    }, stats.part(), video_bytes)


def _section(positions: np.ndarray, keys: list[str], parts: list[list[Buffer]]) -> list[Buffer]:
    """A section as the buffers to write one after another (its members are not copied here)."""
    sizes = np.array([[len(p) for p in members] for members in parts], np.int64)
    header = records.dumps({"positions": positions.tolist(), "keys": keys, "sizes": records.to_npy(sizes)})
    return [len(header).to_bytes(8, "little"), header, *(p for members in parts for p in members)]


def _sha256(buffers: list[Buffer]) -> str:
    h = hashlib.sha256()
    for b in buffers:
        h.update(b)
    return h.hexdigest()


def read_section(data: Buffer, section: Section, members: int) -> Iterator[tuple[int, str, list[memoryview]]]:
    """The samples of a section as ``(position, key, members)``, the members views of ``data``."""
    what = f"pack run {section.run[:16]} section at {section.offset}"
    if len(data) < 8:
        raise Malformed(f"{what}: shorter than its header")
    end = 8 + int.from_bytes(data[:8], "little")
    header = records.loads(memoryview(data)[8:end], what) if end <= len(data) else None
    if not isinstance(header, dict):
        raise Malformed(f"{what}: no header")
    positions, keys = header.get("positions"), header.get("keys")
    sizes = records.from_npy(header.get("sizes", b""), what) if isinstance(header.get("sizes"), bytes) else None
    if (not isinstance(positions, list) or not isinstance(keys, list) or sizes is None
            or not len(positions) == len(keys) == section.samples or sizes.shape != (section.samples, members)
            or sizes.dtype != np.int64 or (sizes < 0).any() or end + int(sizes.sum()) != len(data)
            or not all(isinstance(p, int) for p in positions) or not all(isinstance(k, str) for k in keys)):
        raise Malformed(f"{what}: not the {section.samples} samples written there")
    view = memoryview(data)
    at = end
    for position, key, row in zip(positions, keys, sizes.tolist()):
        out = []
        for n in row:
            out.append(view[at:at + n])
            at += n
        yield position, key, out
