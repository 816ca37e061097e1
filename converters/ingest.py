"""``rayform ingest``: source recordings of one format into segments at a site.

A source (a file, or a dataset folder) is converted whole before any of its segments is
stored, so a source that fails half-way stores nothing, and what the store held before is
unchanged (its segments are immutable versions; a failed source adds no version). Several
sources convert in parallel on a process pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rayform.cache.store_view import StoreRef
from rayform.client import Client
from rayform.errors import InvalidInput, RayformError
from rayform.jobs import JobRunner, finishing
from rayform.recordings.segment_writer import SegmentRef
from rayform.recordings.slices import Slice
from rayform.recordings.streams import Stream

Episodes = Iterator[tuple[str, list[Stream], dict[str, Any]]]


def _lerobot(path: Path, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.lerobot import iter_lerobot

    return iter_lerobot(path, options.get("mapping"), options.get("allow_missing", False),
                        bool(options.get("decode_video")), options.get("episodes"))


def _hdf5(path: Path, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.hdf5 import iter_hdf5

    return _renamed(iter_hdf5(path, options.get("fps")), options.get("mapping"))


def _renamed(episodes: Episodes, mapping: Mapping[str, str | None] | None) -> Episodes:
    import dataclasses

    for name, streams, meta in episodes:
        if mapping:
            streams = [dataclasses.replace(s, name=mapping.get(s.name) or s.name)
                       for s in streams if mapping.get(s.name, s.name) is not None]
        yield name, streams, meta


def _ros(path: Path, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.rosbag import read_bag

    yield read_bag(path, options.get("mapping"), options.get("stamp", "header"), options.get("joints"))


FORMATS: dict[str, Callable[[Path, Mapping[str, Any]], Episodes]] = {"lerobot": _lerobot, "hdf5": _hdf5, "ros": _ros}


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
    written: list[str]


def convert_source(job: SourceJob) -> SourceResult:
    """Convert one source completely and store its segments' data, making none visible (runs
    on the executor: each task writes its blobs to the store itself and returns only refs).

    A source file is untrusted input: whatever a malformed one makes a reader library raise
    is one InvalidInput naming the source, never a traceback. A failure, or a stop, takes back
    the blobs this source wrote."""
    source = Path(job.path)
    if not source.exists():
        raise InvalidInput(f"{source}: no such file or folder")
    segments = Client(job.store.open()).segments
    with segments.store.recording_new_blobs() as written:
        try:
            episodes = list(FORMATS[job.fmt](source, job.options))  # whole source first
            if not episodes:
                raise InvalidInput(f"{source}: no episodes to convert")
            task = job.options.get("task")
            if task:  # the task or instruction the user names, over what the source says
                episodes = [(name, streams, {**meta, "task": str(task)}) for name, streams, meta in episodes]
            refs = segments.store_many([(job.site, name, streams, meta) for name, streams, meta in episodes],
                                       allow_nonfinite=bool(job.options.get("allow_nonfinite")))
            finishing()  # what it wrote is now the parent's to take back, with the result
        except BaseException as e:
            segments.discard(written)
            if isinstance(e, RayformError):
                if str(source) in str(e):
                    raise
                raise type(e)(f"{source}: {e}") from None
            if isinstance(e, Exception) and not isinstance(e, MemoryError):
                raise InvalidInput(f"{source}: cannot convert it as {job.fmt} ({type(e).__name__}: "
                                   f"{str(e)[:200]})") from None
            raise
    return SourceResult(refs, list(written))


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
    from tqdm.auto import tqdm

    from rayform.recordings.segment_writer import check_site

    check_site(site)
    if not paths:
        raise InvalidInput(f"ingest {fmt}: no sources given")
    jobs = [SourceJob(client.store.ref, fmt, os.fspath(p), site, dict(options or {})) for p in paths]
    workers = min(len(jobs), workers or os.cpu_count() or 1)
    report = IngestReport()
    done: list[SourceResult] = []
    runner = JobRunner(executor, workers)
    try:
        with runner, tqdm(total=len(jobs), unit="source", desc=f"ingest {fmt}", disable=not progress,
                          leave=False) as bar:
            for result in runner.each(convert_source, jobs):
                done.append(result)
                bar.update()
    except BaseException as e:
        # the pool is stopped: what its jobs still finished is taken back with the rest, and
        # what a job stopped mid-write left (a temporary of a dead process) is swept
        client.segments.discard([d for r in done + runner.finished() for d in r.written])
        client.store.sweep_temporaries()
        if isinstance(e, RayformError) and len(jobs) > 1:
            raise type(e)(f"{e}. Nothing of this ingest of {len(jobs)} sources was stored") from None
        raise
    report.segments = [ref for r in done for ref in r.segments]
    client.segments.record(report.segments)
    if slice_name:
        report.slice = client.slices.create(report.segments, name=slice_name)
    return report


def describe(fmt: str, path: str | os.PathLike[str]) -> list[str]:
    """What a source holds, before converting it: one line per feature or dataset."""
    path = Path(path)
    if fmt == "lerobot":
        from rayform.converters.lerobot import LeRobotDataset

        ds = LeRobotDataset(path)
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
