"""Packing a slice: plan here, render and write shards on an executor, manifest here.

Two rounds of jobs on any ``concurrent.futures.Executor`` (a local process pool by default,
a Dask or Ray cluster's for slices bigger than one machine):

1. runs (``runs.render_run``): consecutive tasks rendered in time order, each sample written
   to scratch in the section of the shard that will hold it;
2. shards (``assemble.write_shard``): each shard gathered from every run's section for it,
   written, measured and stored by the job itself.

Where each sample goes is a pure function of the plan (``sharding.ShardLayout``), so the
shards are the same bytes whatever the executor and however many workers. The driver sees
only hashes, index rows and statistics: no sample byte passes through it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import shutil
from collections.abc import Iterator
from concurrent.futures import Executor

import numpy as np
from tqdm.auto import tqdm

from rayform import config
from rayform.cache.store_view import CachedStore
from rayform.errors import InvalidInput, NotFound
from rayform.interrupts import held
from rayform.jobs import JobRunner
from rayform.pack.layout import clip_members, members_of
from rayform.pack.manifest import (
    SEGMENTS_APART,
    Pack,
    PackBlobs,
    SegmentCount,
    ShardInfo,
    pack_ref,
    segment_entries,
    write_manifest,
)
from rayform.pack.packs import Packs
from rayform.pack.spec import PackSpec
from rayform.packer import estimate
from rayform.packer import tar_writer as shard_files
from rayform.packer.assemble import ShardJob, write_shard
from rayform.packer.measure import merge as merge_stats
from rayform.packer.measure import quantile_stride
from rayform.packer.placement import ClipLayout, ShardLayout
from rayform.packer.plan import SegmentPlan, Task, tasks_of
from rayform.packer.quality import measured
from rayform.packer.runs import Piece, RunJob, RunResult, render_run
from rayform.packer.scratch import SCRATCH, LocalScratch, Scratch, StoreScratch, writing
from rayform.packer.survey import survey
from rayform.packer.tar_writer import ShardFile
from rayform.recordings.slices import Slice
from rayform.store.atomic import scratch_dir, sweep_scratch
from rayform.store.content import canonical_json

log = logging.getLogger("rayform.pack")
RUNS = 32  # a slice is rendered in at least this many runs


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
    surveyed = survey(slice_, spec)  # one pass over the segments: their plans, the schema
    spec, plans, schema = surveyed.spec, surveyed.plans, surveyed.schema
    schema = measured(schema, plans, spec, slice_.segment)  # encoded cameras: their PSNR, a target's CRF
    streams = spec.streams or ()
    video = any(s.video is not None for s in schema.values())
    if video:  # tasks and runs start on a clip's first sample (``packer.clips``)
        spec = dataclasses.replace(spec, samples_per_task=-(-spec.samples_per_task // spec.clip_frames)
                                   * spec.clip_frames)
    total = sum(len(p.times) for p in plans)
    if total == 0:
        raise InvalidInput(
            f"{slice_.id}: no instant at {spec.fps} fps has every stream of {', '.join(streams)} "
            "fresh; check the streams' time ranges or raise the staleness tolerance"
        )
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise InvalidInput(f"workers {workers}: must be a whole number of processes, at least 1")
    workers = workers or config.pack_workers() or os.cpu_count() or 1
    members = tuple(sorted(members_of(schema, spec.max_history)))
    _sweep(store)
    sample_bytes = estimate.sample_bytes(slice_.store_ref, slice_.id, spec, schema, plans)
    layout: ShardLayout | ClipLayout = (
        ClipLayout.for_bytes(tuple(len(p.times) for p in plans), spec.clip_frames, sample_bytes, spec.shard_bytes,
                             spec.interleave_seed) if video else
        ShardLayout.for_bytes(total, sample_bytes, spec.shard_bytes, spec.interleave_seed))
    scratch: Scratch | None = None
    runs: list[RunResult] = []
    try:
        with held():  # a Ctrl-C waits for the scratch directory to be this pack's to remove
            scratch = LocalScratch.create() if executor is None else StoreScratch(slice_.store_ref)
        run_jobs = [RunJob(slice_.store_ref, slice_.id, spec, schema, members, layout, scratch, group,
                           quantile_stride(total))
                    for group in _runs(plans, spec.samples_per_task, _run_samples(layout),
                                       spec.clip_frames if video else 1)]
        parallel = executor is not None or (workers > 1 and len(run_jobs) > 1)
        with JobRunner(executor, workers if parallel else 1) as pool:
            with tqdm(total=total, unit="sample", desc=f"pack {slice_.id}", disable=not progress, leave=False) as bar:
                for run in pool.each(render_run, run_jobs):
                    runs.append(run)
                    bar.update(run.samples)
            shard_jobs = [
                ShardJob(k, layout.bounds(k), tuple(r.sections[k] for r in runs if k in r.sections), scratch,
                         slice_.store_ref, members, shard_files.CHUNK_BYTES, frozenset(clip_members(schema)))
                for k in range(layout.shards)
            ]
            written = pool.each(write_shard, shard_jobs)  # submitted now: the workers write while
            stats = merge_stats((r.stats for r in runs), {n: s.shape for n, s in schema.items()})  # this runs
            with tqdm(total=layout.shards, unit="shard", desc=f"write {slice_.id}", disable=not progress,
                      leave=False) as bar:
                shards = []
                for shard in written:
                    shards.append(shard)
                    bar.update(1)
    except BaseException:
        _sweep(store)  # the pool is gone: what its stopped workers were writing
        raise
    finally:
        if scratch is not None:
            _remove_runs(scratch, runs)

    for name, s in schema.items():
        if s.video is not None:
            counted = dataclasses.replace(s.video, packet_bytes=sum(r.video_bytes.get(name, 0) for r in runs))
            schema[name] = dataclasses.replace(s, video=counted)
    counts = [SegmentCount(p.segment_id, p.version, p.site, len(p.times), p.instants, p.dropped) for p in plans]
    apart = store.put_json_blob(segment_entries(counts)) if len(counts) >= SEGMENTS_APART else None
    index, chunks = index_blob(store, shards), store.put_blob(b"".join(s.chunks for s in shards))
    stored = PackBlobs([ShardInfo(s.sha256, s.bytes, s.samples) for s in shards], index, shard_files.CHUNK_BYTES,
                       chunks, apart)
    manifest = write_manifest(slice_id=slice_.id, slice_digest=slice_.digest, spec=spec, schema=schema,
                              members=members, stored=stored, stats=stats, segments=counts)
    data = canonical_json(manifest)
    digest = store.put_blob(data)
    # a pack runs for long: a gc with a shorter grace may have taken a shard, which cannot be
    # written again from here (nothing is committed then), and its manifest once the ref is there
    committed: list[str] = [*(shard.sha256 for shard in shards), index, chunks, *([apart] if apart else [])]
    store.confirm_committed(dict.fromkeys(committed), f"pack {spec.key()} of {slice_.id}")
    made = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    store.put_ref(f"refs/packs/{slice_.id}/{spec.key()}.json", pack_ref(digest, spec, made))
    store.confirm_committed({digest: data}, f"pack {spec.key()} of {slice_.id}")
    pack = Pack(digest, manifest)
    if pack.dropped["instants"]:
        log.info("%s: dropped %d of %d instants as stale (%s)", slice_.id, pack.dropped["instants"],
                 pack.instants, ", ".join(f"{k}: {v}" for k, v in pack.dropped["by_stream"].items() if v))
    return pack


def index_blob(store: CachedStore, shards: list[ShardFile]) -> str:
    """The offset index (``(samples, 1 + columns)`` int64 npy: shard, then the shard's row),
    written shard by shard to a file (720 MB for ten million samples: not built in memory)."""
    columns = 1 + (shards[0].index.shape[1] if shards else 0)
    directory = scratch_dir(SCRATCH)
    path = os.path.join(directory, "index.npy")
    try:
        with writing(directory), open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.dtype(np.int64).str, "fortran_order": False,
                                                     "shape": (sum(s.samples for s in shards), columns)})
            for i, s in enumerate(shards):
                f.write(np.column_stack([np.full(s.samples, i, np.int64), s.index]).astype(np.int64).tobytes())
        return store.put_blob_file(path, move=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _run_samples(layout: ShardLayout | ClipLayout) -> int:
    # A run is held in its worker's memory while rendered: at most a shard's worth; and a
    # slice makes at least RUNS of them, so that the workers have work to share. A pure
    # function of the plan: the statistics are merged run by run.
    return max(1, min(layout.per_shard, -(-layout.samples // RUNS)))


def _runs(plans: list[SegmentPlan], samples_per_task: int, per_run: int, clip: int = 1
          ) -> Iterator[tuple[Piece, ...]]:
    """The slice's samples in rendering order, cut into runs of about ``per_run`` (the last
    fewer), each run a tuple of tasks of at most ``samples_per_task`` samples of one segment;
    a task cut only where a clip of ``clip`` samples starts."""
    run: list[Piece] = []
    first = filled = 0
    per_run = max(per_run, clip)
    for plan in plans:
        span = (int(plan.times[0]), plan.end_ns) if len(plan.times) else (0, plan.end_ns)
        for task in tasks_of(plan, samples_per_task):
            while len(task.times):
                take = min(len(task.times), per_run - filled)
                if take < len(task.times):
                    take -= take % clip
                if not take:  # the rest of this run is shorter than a clip: the clip starts the next
                    yield tuple(run)
                    run, filled = [], 0
                    continue
                run.append(Piece(plan.segment_id, span, Task(task.position, task.version, task.start,
                                                              task.times[:take], task.grid_index[:take], task.bundle),
                                 first))
                task = Task(task.position, task.version, task.start + take, task.times[take:], task.grid_index[take:],
                            task.bundle)
                first += take
                filled += take
                if filled == per_run:
                    yield tuple(run)
                    run, filled = [], 0
    if run:
        yield tuple(run)


def _remove_runs(scratch: Scratch, runs: list[RunResult]) -> None:
    for name in sorted({s.run for r in runs for s in r.sections.values()}):
        try:
            scratch.remove(name)
        except Exception as e:  # a run left behind is garbage, not a failed pack
            log.warning("rayform: could not remove pack run %s: %s", name[:16], e)
    if isinstance(scratch, LocalScratch):
        shutil.rmtree(scratch.directory, ignore_errors=True)


def _sweep(store: CachedStore) -> None:
    """What killed packs left: temporaries in a local store and in the cache, scratch dirs."""
    store.sweep_temporaries()
    if store.cache is not None:
        store.cache.remove_stale_temporaries()
    sweep_scratch(SCRATCH)
