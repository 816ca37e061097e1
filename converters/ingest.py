"""``rayform ingest``: source recordings of one format into segments at a site.

The sources are cut into tasks (a file each; a LeRobot dataset, ``formats.EPISODES_PER_TASK``
episodes each) that run on any ``concurrent.futures.Executor`` (a local process pool by
default, a Dask or Ray cluster's for a collection): each task converts its episodes, writes
their blobs straight to the store and returns only refs and the digests it wrote. Nothing is
visible until every task has finished; a task that fails (or a Ctrl-C) takes back what every
task wrote, so the store is left as it was (segments are immutable versions; a failed ingest
adds none). With video kept as recorded (LeRobot), a task is I/O: it copies packets.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rayform.cache.store_view import CachedStore, StoreRef
from rayform.converters.formats import FORMATS, source_format
from rayform.converters.source_files import is_url
from rayform.converters.source_options import SourceOptions
from rayform.errors import InvalidInput, RayformError
from rayform.interrupts import held
from rayform.jobs import JobRunner, Run, finishing
from rayform.recordings.segment_writer import SegmentRef
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice, Slices
from rayform.recordings.streams import ArrayStream
from rayform.store.freshness import NewBlob


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
    options: SourceOptions


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
        if not FORMATS[job.fmt].remote:
            remote = ", ".join(name for name, f in FORMATS.items() if f.remote)
            raise InvalidInput(f"{source}: {job.fmt} sources are local files; a source of {remote} may be a URL")
    elif not Path(source).exists():
        raise InvalidInput(f"{source}: no such file or folder")
    segments = Segments(job.store.open())
    with segments.store.recording_new_blobs() as written:
        try:
            episodes = list(FORMATS[job.fmt].episodes(source, job.options))  # whole task first
            if not episodes:
                raise InvalidInput(f"{source}: no episodes to convert")
            task = job.options.task
            if task:  # the task or instruction the user names, over what the source says
                episodes = [(name, streams, {**meta, "task": task}) for name, streams, meta in episodes]
            if job.options.limits:
                episodes = [(name, _declared(streams, job.options.limits, name), meta) for name, streams, meta in episodes]
            refs = segments.store_many([(job.site, name, streams, meta) for name, streams, meta in episodes],
                                       allow_nonfinite=job.options.allow_nonfinite)
            finishing()  # what it wrote is now the parent's to take back, with the result
        except BaseException as e:
            raise _carrying(_as_ingest_error(e, source, job.fmt), written) from None
    return SourceResult(refs, list(written))


def _declared(streams: list[Any], limits: Mapping[str, tuple[Any, Any]], episode: str) -> list[Any]:
    """An episode's streams with the limits the user declares (``--limits``) on the array streams named."""
    by_name = {s.name: s for s in streams}
    for name in limits:
        if not isinstance(by_name.get(name), ArrayStream):
            arrays = ", ".join(s.name for s in streams if isinstance(s, ArrayStream)) or "none"
            raise InvalidInput(f"--limits {name}: episode {episode} has no array stream of that name (its array "
                               f"streams: {arrays})")
    return [dataclasses.replace(s, limits=limits[s.name]) if s.name in limits else s for s in streams]


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
    options: SourceOptions | Mapping[str, Any] | None = None,
    slice_name: str | None = None,
    run: Run | None = None,
) -> IngestReport:
    """Convert ``paths`` (of format ``fmt``) into segments at ``site``, all or nothing: every
    source is converted and its data stored before any segment becomes visible, and a failure
    (or Ctrl-C) anywhere takes back every blob this ingest wrote, leaving the store as it was.

    ``options``: the format's (``SourceOptions``, or a mapping of its fields), checked first.
    Sources convert in parallel: on ``run.executor`` (any ``concurrent.futures.Executor``, e.g.
    a Dask cluster's; each task writes straight to the store), else a process pool of
    ``run.workers`` (default: all cores)."""
    checked = source_format(fmt).options_of(options)  # a known format, its extra installed, its options
    from tqdm.auto import tqdm

    from rayform.recordings.segment_writer import check_site

    check_site(site)
    if not paths:
        raise InvalidInput(f"ingest {fmt}: no sources given")
    run = run or Run()
    workers = run.workers or os.cpu_count() or 1
    jobs = [job for p in paths for job in _tasks(SourceJob(client.store.ref, fmt, os.fspath(p), site, checked), workers)]
    workers = min(len(jobs), workers)
    report = IngestReport()
    done: list[SourceResult] = []
    runner = JobRunner(run.executor, workers)
    committed = False  # from the catalog part on, the ingest is in the store: never taken back
    try:
        with runner, tqdm(total=len(jobs), unit="task", desc=f"ingest {fmt}", disable=not run.progress,
                          leave=False) as bar:
            for result in runner.each(convert_source, jobs):
                done.append(result)
                bar.update()
        report.segments = [ref for r in done for ref in r.segments]
        # the commit: a catalog part per site, then the slice; a Ctrl-C meanwhile waits for both.
        # One that lands before it (the pool ended, the commit not begun) takes the ingest back
        # like any other: no instant is left where it stops the command with the blobs stored
        with held():
            client.segments.confirm([d for r in done for d in r.written])
            client.segments.record(report.segments)
            committed = True
            if slice_name:
                report.slice = client.slices.create(report.segments, name=slice_name)
    except BaseException as e:
        if committed:  # the segments are recorded: their blobs are theirs (a slice failed, or a held Ctrl-C)
            raise
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
    return report


def _tasks(job: SourceJob, workers: int) -> list[SourceJob]:
    """A source's tasks, as its format cuts it (``SourceFormat.tasks``; else one)."""
    split = FORMATS[job.fmt].tasks
    if split is None:
        return [job]
    return [dataclasses.replace(job, options=options) for options in split(job.path, job.options, workers)]
