"""``rayform ingest``: source recordings of one format into segments at a site.

The sources are cut into tasks (a file each; a LeRobot dataset, ``EPISODES_PER_TASK``
episodes each) that run on any ``concurrent.futures.Executor`` (a local process pool by
default, a Dask or Ray cluster's for a collection): each task converts its episodes, writes
their blobs straight to the store and returns only refs and the digests it wrote. Nothing is
visible until every task has finished; a task that fails (or a Ctrl-C) takes back what every
task wrote, so the store is left as it was (segments are immutable versions; a failed ingest
adds none). With video kept as recorded (LeRobot), a task is I/O: it copies packets.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rayform.cache.store_view import CachedStore, StoreRef
from rayform.converters.source_files import is_url
from rayform.errors import InvalidInput, RayformError
from rayform.interrupts import held
from rayform.jobs import JobRunner, finishing
from rayform.recordings.segment_writer import SegmentRef
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice, Slices
from rayform.recordings.streams import Stream
from rayform.store.freshness import NewBlob

Episodes = Iterator[tuple[str, list[Stream], dict[str, Any]]]
EPISODES_PER_TASK = 16  # a LeRobot dataset's episodes a task converts (fewer where that leaves workers idle)


def _lerobot(path: str, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.lerobot import iter_lerobot

    return iter_lerobot(path, options.get("mapping"), options.get("allow_missing", False),
                        bool(options.get("decode_video")), options.get("episodes"), options.get("storage_options"))


def _hdf5(path: str, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.hdf5 import iter_hdf5

    return _renamed(iter_hdf5(Path(path), options.get("fps")), options.get("mapping"))


def _renamed(episodes: Episodes, mapping: Mapping[str, str | None] | None) -> Episodes:
    import dataclasses

    for name, streams, meta in episodes:
        if mapping:
            streams = [dataclasses.replace(s, name=mapping.get(s.name) or s.name)
                       for s in streams if mapping.get(s.name, s.name) is not None]
        yield name, streams, meta


def _ros(path: str, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.rosbag import read_bag

    yield read_bag(Path(path), options.get("mapping"), options.get("stamp", "header"), options.get("joints"))


def _rlds(path: str, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.rlds import iter_rlds

    return iter_rlds(path, options)


FORMATS: dict[str, Callable[[str, Mapping[str, Any]], Episodes]] = {"lerobot": _lerobot, "hdf5": _hdf5, "ros": _ros,
                                                                    "rlds": _rlds}
REMOTE = ("lerobot", "rlds")  # formats whose sources may be URLs
# the module a format reads with, and the extra bringing it (LeRobot's videos: PyAV, asked where read)
NEEDS = {"hdf5": ("h5py", "hdf5"), "ros": ("rosbags", "ros"), "rlds": ("google.protobuf", "rlds")}


def check_extra(fmt: str) -> None:
    """One line naming the ``pip install`` where the library a format reads with is absent."""
    if fmt not in NEEDS:
        return
    module, extra = NEEDS[fmt]
    if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
        raise InvalidInput(f"ingest {fmt} needs {module}: pip install 'rayform[{extra}]'")


class Client(Protocol):
    """What ingest takes of a ``rayform.Client`` (which calls it: ``Client.ingest``)."""

    store: CachedStore
    segments: Segments
    slices: Slices


@dataclass
class IngestReport:
    segments: list[SegmentRef] = field(default_factory=list)
    slice: Slice | None = None


@dataclass(frozen=True)
class SourceJob:
    """One source to convert, as a job for any executor (it pickles: no open handles)."""

    store: StoreRef
    fmt: str
    path: str
    site: str
    options: Mapping[str, Any]


@dataclass(frozen=True)
class SourceResult:
    """A converted source: its segments (stored, not yet visible) and the blobs it wrote that
    were not in the store before (taken back if the ingest fails)."""

    segments: list[SegmentRef]
    written: list[NewBlob]


def convert_source(job: SourceJob) -> SourceResult:
    """Convert one source completely and store its segments' data, making none visible (runs
    on the executor: each task writes its blobs to the store itself and returns only refs).

    A source file is untrusted input: whatever a malformed one makes a reader library raise
    is one InvalidInput naming the source, never a traceback. A failure, or a stop, takes back
    the blobs this source wrote."""
    source = job.path
    if is_url(source):
        if job.fmt not in REMOTE:
            raise InvalidInput(f"{source}: {job.fmt} sources are local files; a LeRobot or RLDS dataset may be a URL")
    elif not Path(source).exists():
        raise InvalidInput(f"{source}: no such file or folder")
    segments = Segments(job.store.open())
    with segments.store.recording_new_blobs() as written:
        try:
            episodes = list(FORMATS[job.fmt](source, job.options))  # whole task first
            if not episodes:
                raise InvalidInput(f"{source}: no episodes to convert")
            task = job.options.get("task")
            if task:  # the task or instruction the user names, over what the source says
                episodes = [(name, streams, {**meta, "task": str(task)}) for name, streams, meta in episodes]
            refs = segments.store_many([(job.site, name, streams, meta) for name, streams, meta in episodes],
                                       allow_nonfinite=bool(job.options.get("allow_nonfinite")))
            finishing()  # what it wrote is now the parent's to take back, with the result
        except BaseException as e:
            raise _carrying(_as_ingest_error(e, source, job.fmt), written) from None
    return SourceResult(refs, list(written))


def _as_ingest_error(e: BaseException, source: str, fmt: str) -> BaseException:
    """The error a failed task reports: ours naming the source; a reader library's as InvalidInput."""
    if isinstance(e, RayformError):
        return e if str(source) in str(e) else type(e)(f"{source}: {e}")
    if isinstance(e, Exception) and not isinstance(e, MemoryError):
        return InvalidInput(f"{source}: cannot convert it as {fmt} ({type(e).__name__}: {str(e)[:200]})")
    return e


def _carrying(e: BaseException, written: list[NewBlob]) -> BaseException:
    """``e`` with the blobs its task wrote and found (``e.written``: an exception's attributes
    cross processes with it, a stopped job's too, ``jobs``): the ingest takes back what every
    task wrote in one go, knowing every task's marks, so a blob one task wrote and another
    freshened is not mistaken for another writer's."""
    e.written = list(written)  # type: ignore[attr-defined]
    return e


def _written_by(failures: Sequence[BaseException]) -> list[NewBlob]:
    return [b for e in failures for b in getattr(e, "written", ())]


def ingest(
    client: Client,
    fmt: str,
    paths: Sequence[str | os.PathLike[str]],
    site: str,
    *,
    options: Mapping[str, Any] | None = None,
    slice_name: str | None = None,
    executor: Executor | None = None,
    workers: int | None = None,
    progress: bool = True,
) -> IngestReport:
    """Convert ``paths`` (of format ``fmt``) into segments at ``site``, all or nothing: every
    source is converted and its data stored before any segment becomes visible, and a failure
    (or Ctrl-C) anywhere takes back every blob this ingest wrote, leaving the store as it was.

    Sources convert in parallel: on ``executor`` (any ``concurrent.futures.Executor``, e.g. a
    Dask cluster's; each task writes straight to the store), else a process pool of
    ``workers`` (default: all cores)."""
    if fmt not in FORMATS:
        raise InvalidInput(f"format {fmt!r}: one of {', '.join(sorted(FORMATS))}")
    check_extra(fmt)
    from tqdm.auto import tqdm

    from rayform.recordings.segment_writer import check_site

    check_site(site)
    if not paths:
        raise InvalidInput(f"ingest {fmt}: no sources given")
    workers = workers or os.cpu_count() or 1
    jobs = [job for p in paths for job in _tasks(SourceJob(client.store.ref, fmt, os.fspath(p), site,
                                                           dict(options or {})), workers)]
    workers = min(len(jobs), workers)
    report = IngestReport()
    done: list[SourceResult] = []
    runner = JobRunner(executor, workers)
    try:
        with runner, tqdm(total=len(jobs), unit="task", desc=f"ingest {fmt}", disable=not progress,
                          leave=False) as bar:
            for result in runner.each(convert_source, jobs):
                done.append(result)
                bar.update()
    except BaseException as e:
        # the pool is stopped: what its jobs still finished, failed or were stopped in the middle
        # of is taken back together, and what a job killed mid-write left (a temporary of a dead
        # process) is swept
        written = [d for r in done + runner.finished() for d in r.written] + _written_by([e, *runner.failed()])
        client.store.sweep_temporaries()
        client.segments.discard(written)  # and the folders that leaves empty
        if isinstance(e, RayformError) and len(jobs) > 1:
            what = f"of {len(paths)} sources" if len(paths) > 1 else f"({len(jobs)} tasks)"
            raise type(e)(f"{e}. Nothing of this ingest {what} was stored") from None
        raise
    report.segments = [ref for r in done for ref in r.segments]
    # the commit: a catalog part per site, then the slice; a Ctrl-C meanwhile waits for both
    with held():
        try:
            client.segments.confirm([d for r in done for d in r.written])
            client.segments.record(report.segments)
        except BaseException:
            client.segments.discard([d for r in done for d in r.written])
            raise
        if slice_name:
            report.slice = client.slices.create(report.segments, name=slice_name)
    return report


def _tasks(job: SourceJob, workers: int) -> list[SourceJob]:
    """A source's tasks: a LeRobot dataset's episodes in runs of at most ``EPISODES_PER_TASK``
    (as many runs as keep ``workers`` busy); an RLDS dataset's shards, one each; any other
    source, one."""
    if job.fmt == "rlds" and job.options.get("shard") is None:
        from rayform.converters.rlds import RldsDataset

        try:
            ds = RldsDataset(job.path, job.options.get("mapping"), job.options.get("storage_options"),
                             job.options.get("fps"), job.options.get("task_key"))
            shards = ds.shards(job.options.get("splits"))
        except RayformError:
            return [job]  # its task says what is wrong, naming the source
        return [dataclasses.replace(job, options={**job.options, "shard": (s.split, s.index), "docs": ds.docs})
                for s in shards if s.episodes] or [job]
    if job.fmt != "lerobot" or "episodes" in job.options:
        return [job]
    from rayform.converters.lerobot import LeRobotDataset

    try:
        lerobot = LeRobotDataset(job.path, job.options.get("mapping"), job.options.get("storage_options"))
        count = len(lerobot.select(bool(job.options.get("allow_missing"))))
    except RayformError:
        return [job]  # its task says what is wrong, naming the source
    per = max(1, min(EPISODES_PER_TASK, -(-count // (4 * workers))))
    return [dataclasses.replace(job, options={**job.options, "episodes": (first, min(count, first + per))})
            for first in range(0, count, per)] or [job]


def describe(fmt: str, path: str | os.PathLike[str], fps: float | None = None,
             options: Mapping[str, Any] | None = None) -> list[str]:
    """What a source holds, before converting it: one line per feature or dataset."""
    check_extra(fmt)
    if fmt == "rlds":
        from rayform.converters.rlds import describe as describe_rlds

        return describe_rlds(path, fps, options)
    if fmt == "lerobot":
        from rayform.converters.lerobot import LeRobotDataset

        ds = LeRobotDataset(path, None, (options or {}).get("storage_options"))
        episodes = ds.episodes()
        present = [e for e in episodes if not ds.missing(e)]
        frames = sum(e.length for e in present)
        lines = [f"{path}: LeRobot {ds.version}, robot {ds.info.get('robot_type')}, {ds.fps:g} fps, "
                 f"{len(episodes)} episodes in the meta, {len(present)} present ({frames} frames, "
                 f"{frames / ds.fps:.1f} s)"]
        for feature, spec in ds.features.items():
            target = ds.mapping.get(feature, "(skipped)")
            lines.append(f"  {feature:32} {spec.get('dtype'):8} {str(spec.get('shape')):14} -> {target}")
        return lines
    path = Path(path)
    if fmt == "hdf5":
        from rayform.converters.hdf5 import _open, detect

        lines = [f"{path}: HDF5, {detect(path)} layout"]
        with _open(path) as f:
            def visit(name: str, obj: Any) -> None:
                if hasattr(obj, "shape"):
                    lines.append(f"  /{name:40} {str(obj.shape):18} {obj.dtype}")
            f.visititems(visit)
        return lines
    if fmt == "ros":
        from rayform.converters.rosbag import describe_bag

        return describe_bag(path)
    raise InvalidInput(f"format {fmt!r}: one of {', '.join(sorted(FORMATS))}")
