"""Rendering runs: the first half of packing, on any executor.

A run is a few consecutive tasks (runs of one segment's samples, in time order: what video
decoding and the renderer's caches want). The task that renders it knows where each of its
samples lies in the pack and which shard holds that place (``sharding.ShardLayout``, a pure
function of the plan), so it writes its samples to scratch already sorted into one section per
shard, and returns only where those sections are: no sample byte goes back to the driver.

A section is one msgpack list of ``[position, key, [member bytes, in sorted member order]]``,
in position order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from rayform.codec import records
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer.plan import Task
from rayform.packer.render import render_task
from rayform.packer.scratch import Scratch, Section
from rayform.packer.sharding import ShardLayout
from rayform.store.cached import StoreRef


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
    layout: ShardLayout
    scratch: Scratch
    pieces: tuple[Piece, ...]


@dataclass(frozen=True)
class RunResult:
    samples: int
    sections: dict[int, Section]  # shard -> its part of this run


def render_run(job: RunJob) -> RunResult:
    keys: list[str] = []
    parts: list[list[bytes]] = []
    positions = []
    for piece in job.pieces:
        rendered = render_task(job.store_ref, piece.segment_id, job.slice_id, job.spec, job.schema, piece.span,
                               piece.task)
        positions.append(job.layout.positions(piece.first, piece.first + len(rendered)))
        for key, members in rendered:
            keys.append(key)
            parts.append([members[m] for m in job.members])
    where = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    order = np.argsort(where, kind="stable")
    shard_of = where[order] // job.layout.per_shard
    cuts = np.flatnonzero(np.diff(shard_of)) + 1
    sections: list[bytes] = []
    shards: list[int] = []
    counts: list[int] = []
    for group in np.split(order, cuts) if len(order) else []:
        shards.append(int(where[group[0]] // job.layout.per_shard))
        counts.append(len(group))
        sections.append(records.dumps([[int(where[i]), keys[i], parts[i]] for i in group.tolist()]))
    run, offsets = job.scratch.write(sections)
    return RunResult(len(keys), {
        shard: Section(run, offset, len(data), n, hashlib.sha256(data).hexdigest() if job.scratch.verifies else "")
        for shard, offset, data, n in zip(shards, offsets, sections, counts)
    })
