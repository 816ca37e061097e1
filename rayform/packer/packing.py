"""Packing a slice: plan in this process, render on an executor, write shards in order.

Tasks (runs of up to ``samples_per_task`` samples of one segment) are rendered on any
``concurrent.futures.Executor`` (a local process pool by default, Dask's or another for
slices bigger than one machine). Results are consumed in task order and shards are
written only here, so the shard bytes never depend on how many processes rendered them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from rayform import config
from rayform.codec import records
from rayform.errors import InvalidInput, NotFound
from rayform.pack.layout import LOWDIM, StreamSchema, members_of
from rayform.pack.manifest import Pack
from rayform.pack.packs import Packs
from rayform.pack.spec import PACK_FORMAT, PackSpec
from rayform.packer import shards as shard_files
from rayform.packer.interleave import Spill, layout_order
from rayform.packer.measure import StatsMeasure
from rayform.packer.plan import (
    SegmentPlan,
    Task,
    plan_segment,
    resolve_streams,
    tasks_of,
)
from rayform.packer.render import member_format, render_task
from rayform.packer.shards import ShardFile, ShardWriter
from rayform.recordings.segments import Segment
from rayform.recordings.slices import Slice
from rayform.store.cached import CachedStore
from rayform.store.files import exit_with, scratch_dir, sweep_scratch

log = logging.getLogger("rayform.pack")
SCRATCH = os.path.join(tempfile.gettempdir(), "rayform-pack")  # shards are written here before they are stored


def pack_slice(
    slice_: Slice,
    spec: PackSpec,
    *,
    executor: Executor | None = None,
    workers: int | None = None,
    progress: bool = True,
    force: bool = False,
) -> Pack:
    """The pack of ``slice_`` made with ``spec``: the one stored already (unless ``force``),
    else ``slice_`` rendered into shards in its store."""
    if not force:
        try:
            return Packs(slice_.store).get(slice_, spec)
        except NotFound:
            pass
    return _render_pack(slice_, spec, executor, workers, progress)


def _render_pack(slice_: Slice, spec: PackSpec, executor: Executor | None, workers: int | None,
                 progress: bool) -> Pack:
    store = slice_.store
    segments = [slice_.segment(i) for i in range(len(slice_.segments))]
    streams = resolve_streams(segments, spec.streams)
    spec = dataclasses.replace(spec, streams=streams)
    schema = _schema(segments, spec)
    plans = [plan_segment(i, seg, slice_.segments[i], spec) for i, seg in enumerate(segments)]
    total = sum(len(p.times) for p in plans)
    if total == 0:
        raise InvalidInput(
            f"{slice_.id}: no instant at {spec.fps} fps has every stream of {', '.join(streams)} "
            "fresh; check the streams' time ranges or raise the staleness tolerance"
        )
    members = members_of(schema, spec.max_history)
    _sweep(store)
    tasks = [(plans[t.position], t) for p in plans for t in tasks_of(p, spec.samples_per_task)]

    bar = tqdm(total=total, unit="sample", desc=f"pack {slice_.id}", disable=not progress, leave=False)
    tmp = scratch_dir(SCRATCH)
    try:
        writer = ShardWriter(tmp, spec.shard_bytes, members, shard_files.CHUNK_BYTES)
        stored = StoredShards(store)
        samples = _counted(_rendered(slice_, spec, schema, tasks, executor, workers), bar)
        if spec.interleave_seed is not None:
            samples = _interleaved(samples, os.path.join(tmp, "spill"), members, total, spec.interleave_seed)
        measure = StatsMeasure(schema, total)
        for key, sample in samples:
            measure.add(sample[LOWDIM])
            for shard in writer.add(key, sample):
                stored.add(shard)
        for shard in writer.finish():
            stored.add(shard)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bar.close()

    manifest = {
        "format": PACK_FORMAT,
        "slice": slice_.id,
        "slice_digest": slice_.digest,
        "spec": spec.to_manifest(),
        "schema": {n: s.to_manifest() for n, s in schema.items()},
        "members": members,
        **stored.manifest_fields(writer.chunk_bytes),
        "samples": total,
        "stats": {k: v.to_manifest() for k, v in measure.result({n: s.shape for n, s in schema.items()}).items()},
        "instants": sum(p.instants for p in plans),
        "dropped": _dropped(plans),
        "segments": [
            {"id": p.segment_id, "version": p.version, "site": p.site, "samples": len(p.times),
             "instants": p.instants, "dropped": p.dropped}
            for p in plans
        ],
    }
    digest = store.put_json_blob(manifest)
    store.put_ref(f"refs/packs/{slice_.id}/{spec.key()}.json", {"manifest": digest, "spec": spec.to_manifest()})
    pack = Pack(digest, manifest)
    if pack.dropped["instants"]:
        log.info("%s: dropped %d of %d instants as stale (%s)", slice_.id, pack.dropped["instants"],
                 pack.instants, ", ".join(f"{k}: {v}" for k, v in pack.dropped["by_stream"].items() if v))
    return pack


class StoredShards:
    """Finished shards moved into the store in order, and what the pack manifest says of them:
    the shard list, the offset index blob and the chunk digests blob."""

    def __init__(self, store: CachedStore) -> None:
        self.store = store
        self.shards: list[dict[str, Any]] = []
        self._rows: list[np.ndarray] = []
        self._chunks: list[bytes] = []

    def add(self, shard: ShardFile) -> None:
        self.store.put_blob_file(shard.path, shard.sha256)
        os.unlink(shard.path)
        self._rows.append(np.column_stack([np.full(shard.samples, len(self.shards), np.int64), shard.index]))
        self.shards.append({"sha256": shard.sha256, "bytes": shard.bytes, "samples": shard.samples})
        self._chunks.append(shard.chunks)

    def manifest_fields(self, chunk_bytes: int) -> dict[str, Any]:
        return {
            "shards": self.shards,
            "index": self.store.put_blob(records.to_npy(np.concatenate(self._rows))),
            "chunks": {"bytes": chunk_bytes, "digests": self.store.put_blob(b"".join(self._chunks))},
        }


def _rendered(
    slice_: Slice,
    spec: PackSpec,
    schema: dict[str, StreamSchema],
    tasks: list[tuple[SegmentPlan, Task]],
    executor: Executor | None,
    workers: int | None,
) -> Iterator[list[tuple[str, dict[str, bytes]]]]:
    """Each task's samples, in task order, rendered on the executor with a bounded window."""
    args = [(slice_.store_ref, plan.segment_id, slice_.id, spec, schema, (int(plan.times[0]), plan.end_ns), task)
            for plan, task in tasks]
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidInput(f"workers {workers}: must be a whole number of processes, at least 1")
    workers = workers or config.pack_workers() or os.cpu_count() or 1
    if executor is None and (workers <= 1 or len(tasks) <= 1):
        for a in args:
            yield render_task(*a)
        return
    own = executor is None
    # each worker ends itself once this process is gone: a killed pack leaves no pool behind
    pool = executor or ProcessPoolExecutor(workers, mp_context=_pool_context(),
                                           initializer=functools.partial(exit_with, os.getpid()))
    window = 2 * (getattr(pool, "_max_workers", None) or workers)
    pending: deque[Future[list[tuple[str, dict[str, bytes]]]]] = deque()
    try:
        for a in args:
            pending.append(pool.submit(render_task, *a))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        if own:
            pool.shutdown(wait=True, cancel_futures=True)


def _counted(batches: Iterator[list[tuple[str, dict[str, bytes]]]], bar: Any) -> Iterator[tuple[str, dict[str, bytes]]]:
    for samples in batches:
        yield from samples
        bar.update(len(samples))


def _interleaved(samples: Iterator[tuple[str, dict[str, bytes]]], path: str, members: list[str], total: int,
                 seed: int) -> Iterator[tuple[str, dict[str, bytes]]]:
    """``samples`` (all ``total`` of them) in the pack's interleaved order: spilled, then read back."""
    spill = Spill(path, members, total)
    try:
        for key, sample in samples:
            spill.add(key, sample)
        if len(spill) != total:
            raise AssertionError(f"rendered {len(spill)} samples, planned {total}")
        yield from spill.in_order(layout_order(total, seed))
    finally:
        spill.close()


def _sweep(store: CachedStore) -> None:
    """What killed packs left: temporaries in a local store and in the cache, scratch dirs."""
    store.sweep_temporaries()
    if store.cache is not None:
        store.cache.remove_stale_temporaries()
    sweep_scratch(SCRATCH)


def _pool_context() -> multiprocessing.context.BaseContext:
    # fork does not re-import the caller's script (spawn and forkserver run an unguarded
    # one again in every worker, and cannot at all from a script read on stdin), but it is
    # unsafe once the parent has threads (s3fs's event loop, say): then forkserver. tqdm's
    # monitor thread does not count: any tqdm bar starts it, even a disabled one, it only
    # sleeps and refreshes bars, and the render workers use no bar.
    if sys.platform.startswith("linux"):
        others = [t for t in threading.enumerate()
                  if t is not threading.main_thread() and type(t).__name__ != "TMonitor"]
        return multiprocessing.get_context("forkserver" if others else "fork")
    return multiprocessing.get_context("spawn")


def _schema(segments: list[Segment], spec: PackSpec) -> dict[str, StreamSchema]:
    first = segments[0]
    out = {}
    for name in spec.streams or ():
        info = first.streams[name]
        for seg in segments[1:]:
            other = seg.streams[name]
            if other.kind != info.kind:
                raise InvalidInput(f"stream {name}: {info.kind} in {first.id} but {other.kind} in {seg.id}")
            if other.shape != info.shape and not (info.is_image and spec.resize):
                raise InvalidInput(
                    f"stream {name}: shape {info.shape} in {first.id} but {other.shape} in {seg.id}; "
                    + ("pack with a resize" if info.is_image else "they cannot share a pack")
                )
        member = name.replace("/", ".")
        if info.is_image:
            fmt = member_format(info.encoding or "raw", info.dtype, spec)
            shape = info.shape if not spec.resize else tuple(spec.resize) + tuple(info.shape[2:])
            out[name] = StreamSchema(name, "image", f"{member}.{fmt}", info.dtype, shape)
        else:
            out[name] = StreamSchema(name, info.kind, member, info.dtype, info.shape, info.units, info.names, info.frame)
    return out


def _dropped(plans: list[SegmentPlan]) -> dict[str, Any]:
    by_stream: dict[str, int] = {}
    for p in plans:
        for name, n in p.dropped.items():
            by_stream[name] = by_stream.get(name, 0) + n
    return {"instants": sum(p.dropped_instants for p in plans), "by_stream": by_stream}
