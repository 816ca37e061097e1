"""Writing one shard: the second half of packing, on any executor.

The task reads the shard's section of every run, puts the samples at their positions, writes
the tar (``shards.ShardWriter``), measures the shard's share of the statistics and stores the
shard in the pack's store itself. What it returns is small: the shard's hash, size, offset
index rows, chunk digests and statistics part.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

from rayform.codec import records
from rayform.errors import Malformed
from rayform.pack.layout import LOWDIM, StreamSchema
from rayform.packer.measure import ShardStats, StatsPart
from rayform.packer.scratch import SCRATCH, Scratch, Section
from rayform.packer.shards import ShardFile, ShardWriter
from rayform.store.cached import StoreRef
from rayform.store.files import scratch_dir

NEVER = 1 << 62  # a shard writer given this target never rolls to a second shard


@dataclass(frozen=True)
class ShardJob:
    number: int
    bounds: tuple[int, int]  # the positions it holds
    sections: tuple[Section, ...]
    scratch: Scratch
    store_ref: StoreRef
    members: tuple[str, ...]  # sorted
    chunk_bytes: int
    schema: dict[str, StreamSchema]
    quantile_stride: int


@dataclass(frozen=True)
class ShardResult:
    shard: ShardFile  # its path is gone: the shard is in the store
    stats: StatsPart


def write_shard(job: ShardJob) -> ShardResult:
    start, end = job.bounds
    slots: list[Any] = [None] * (end - start)
    for section in job.sections:
        _place(job.scratch.read(section), section, slots, start, len(job.members))
    missing = sum(s is None for s in slots)
    if missing:
        raise Malformed(f"shard {job.number}: {missing} of its {end - start} samples are in no rendered run")
    stats = ShardStats(job.schema, job.quantile_stride)
    lowdim = job.members.index(LOWDIM)
    tmp = scratch_dir(SCRATCH)
    try:
        writer = ShardWriter(tmp, NEVER, list(job.members), job.chunk_bytes)
        for i, (key, parts) in enumerate(slots):
            stats.add(parts[lowdim], start + i)
            for _ in writer.add(key, dict(zip(job.members, parts))):
                raise AssertionError("a shard writer rolled over with no target")
            slots[i] = None  # the bytes are in the file now
        (shard,) = writer.finish()
        job.store_ref.open().put_blob_file(shard.path, shard.sha256, move=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ShardResult(shard, stats.part())


def _place(data: bytes, section: Section, slots: list[Any], start: int, members: int) -> None:
    what = f"pack run {section.run[:16]} section at {section.offset}"
    rows = records.loads(data, what)
    if not isinstance(rows, list) or len(rows) != section.samples:
        raise Malformed(f"{what}: not the {section.samples} samples written there")
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], int) and isinstance(row[1], str)
                and isinstance(row[2], list) and len(row[2]) == members
                and all(isinstance(p, bytes) for p in row[2])):
            raise Malformed(f"{what}: a sample is not [position, key, members]")
        i = row[0] - start
        if not 0 <= i < len(slots) or slots[i] is not None:
            raise Malformed(f"{what}: position {row[0]} is not this shard's, or is there twice")
        slots[i] = (row[1], row[2])
