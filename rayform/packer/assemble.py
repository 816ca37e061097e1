"""Writing one shard: the second half of packing, on any executor.

The task reads the shard's section of every run, puts the samples at their positions, writes
the tar (``shards.ShardWriter``) and stores the shard in the pack's store itself. What it
returns is small: the shard's hash, size, offset index rows and chunk digests.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

from rayform.cache.store_view import StoreRef
from rayform.errors import Malformed
from rayform.packer.runs import read_section
from rayform.packer.scratch import SCRATCH, Scratch, Section, writing
from rayform.packer.tar_writer import ShardFile, ShardWriter
from rayform.store.atomic import scratch_dir

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
    shared: frozenset[str] = frozenset()  # video clips: a clip's first sample holds it (``ShardWriter``)


def write_shard(job: ShardJob) -> ShardFile:
    """The shard, stored; its ``path`` is gone (the file is the store's now)."""
    start, end = job.bounds
    slots: list[Any] = [None] * (end - start)
    for section in job.sections:
        what = f"pack run {section.run[:16]} section at {section.offset}"
        for position, key, parts in read_section(job.scratch.read(section), section, len(job.members)):
            i = position - start
            if not 0 <= i < len(slots) or slots[i] is not None:
                raise Malformed(f"{what}: position {position} is not this shard's, or is there twice")
            slots[i] = (key, parts)
    missing = sum(s is None for s in slots)
    if missing:
        raise Malformed(f"shard {job.number}: {missing} of its {end - start} samples are in no rendered run")
    tmp = scratch_dir(SCRATCH)
    try:
        with writing(tmp):
            writer = ShardWriter(tmp, NEVER, list(job.members), job.chunk_bytes, job.shared)
            for i, (key, parts) in enumerate(slots):
                for _ in writer.add(key, dict(zip(job.members, parts))):
                    raise AssertionError("a shard writer rolled over with no target")
                slots[i] = None
            (shard,) = writer.finish()
        job.store_ref.open().put_blob_file(shard.path, shard.sha256, move=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return shard
