"""``rayform ingest``: source recordings of one format into segments at a site.

A source (a file, or a dataset folder) is converted whole before any of its segments is
stored, so a source that fails half-way stores nothing, and what the store held before is
unchanged (its segments are immutable versions; a failed source adds no version). Several
sources convert in parallel on a process pool.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rayform.client import Client
from rayform.errors import InvalidInput, RayformError
from rayform.recordings.segments import SegmentRef
from rayform.recordings.slices import Slice
from rayform.recordings.streams import Stream
from rayform.store.cached import StoreRef

Episodes = Iterator[tuple[str, list[Stream], dict]]


def _lerobot(path: Path, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.lerobot import iter_lerobot

    return iter_lerobot(path, options.get("mapping"), options.get("allow_missing", False))


def _hdf5(path: Path, options: Mapping[str, Any]) -> Episodes:
    from rayform.converters.hdf5 import iter_hdf5

    return _renamed(iter_hdf5(path, options.get("fps")), options.get("mapping"))


def _renamed(episodes: Episodes, mapping: Mapping[str, str | None] | None) -> Episodes:
    import dataclasses

    for name, streams, meta in episodes:
        if mapping:
            streams = [dataclasses.replace(s, name=mapping[s.name]) if s.name in mapping else s
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


def convert_source(store: StoreRef, fmt: str, path: str, site: str, options: Mapping[str, Any]) -> list[SegmentRef]:
    """Convert one source completely, then store its segments all or nothing (runs in pool workers).

    A source file is untrusted input: whatever a malformed one makes a reader library raise
    is one InvalidInput naming the source, never a traceback.
    """
    source = Path(path)
    if not source.exists():
        raise InvalidInput(f"{source}: no such file or folder")
    try:
        episodes = list(FORMATS[fmt](source, options))  # whole source first: a failure stores nothing
        if not episodes:
            raise InvalidInput(f"{source}: no episodes to convert")
        if options.get("task"):  # the task or instruction the user names, over what the source says
            episodes = [(name, streams, {**meta, "task": str(options["task"])}) for name, streams, meta in episodes]
        client = Client(store.open())
        # every episode checked and its data stored before any becomes visible
        return client.segments.add_many([(site, name, streams, meta) for name, streams, meta in episodes])
    except RayformError as e:
        if str(source) in str(e):
            raise
        raise type(e)(f"{source}: {e}") from None
    except MemoryError:
        raise
    except Exception as e:
        raise InvalidInput(f"{source}: cannot convert it as {fmt} ({type(e).__name__}: {str(e)[:200]})") from None


def ingest(
    client: Client,
    fmt: str,
    paths: Sequence[str | os.PathLike],
    site: str,
    *,
    options: Mapping[str, Any] | None = None,
    slice_name: str | None = None,
    workers: int | None = None,
    progress: bool = True,
) -> IngestReport:
    if fmt not in FORMATS:
        raise InvalidInput(f"format {fmt!r}: one of {', '.join(sorted(FORMATS))}")
    from tqdm.auto import tqdm

    from rayform.recordings.segments import check_site

    check_site(site)
    options = dict(options or {})
    report = IngestReport()
    args = [(client.store.ref, fmt, os.fspath(p), site, options) for p in paths]
    bar = tqdm(total=len(args), unit="source", desc=f"ingest {fmt}", disable=not progress, leave=False)
    workers = min(len(args), workers or os.cpu_count() or 1)
    if workers <= 1:
        for a in args:
            report.segments += convert_source(*a)
            bar.update()
    else:
        with ProcessPoolExecutor(workers) as pool:
            for refs in pool.map(convert_source, *zip(*args)):
                report.segments += refs
                bar.update()
    bar.close()
    if slice_name:
        report.slice = client.slices.create(report.segments, name=slice_name)
    return report


def describe(fmt: str, path: str | os.PathLike) -> list[str]:
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
            def visit(name, obj):
                if hasattr(obj, "shape"):
                    lines.append(f"  /{name:40} {str(obj.shape):18} {obj.dtype}")
            f.visititems(visit)
        return lines
    if fmt == "ros":
        from rayform.converters.rosbag import describe_bag

        return describe_bag(path)
    raise InvalidInput(f"format {fmt!r}: one of {', '.join(sorted(FORMATS))}")
