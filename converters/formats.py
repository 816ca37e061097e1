"""Every source format rayform ingests, in one registry: how a source's episodes are read, what
``--list`` says of it, how a source is cut into tasks, the options it reads
(``source_options.SourceOptions``), whether it may be a URL, and the extra its reader library
comes in. ``rayform ingest``, ``Client.ingest``, the CLI's format choices
and the executors' tasks all read ``FORMATS`` (``tests/converters/test_formats.py`` holds each
to it); adding a format is a row here and the steps in docs/design.md, "Adding a source format".

A format's readers are imported when a source is read, never with this module: ``import
rayform`` imports no converter's library.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rayform.converters.source_options import SourceOptions
from rayform.converters.stream_names import StreamNames
from rayform.errors import RayformError
from rayform.recordings.streams import Stream

Episodes = Iterator[tuple[str, list[Stream], dict[str, Any]]]
EPISODES_PER_TASK = 16  # a LeRobot dataset's episodes a task converts (fewer where that leaves workers idle)


@dataclass(frozen=True)
class SourceFormat:
    name: str  # as ``rayform ingest FORMAT`` and ``Client.ingest(fmt)`` take it
    episodes: Callable[[str, SourceOptions], Episodes]  # a source's (or one task's) episodes: (name, streams, meta)
    describe: Callable[[str, SourceOptions], list[str]]  # ``--list``: a line per feature
    options: tuple[str, ...] = ()  # the options of its own it reads, besides source_options.COMMON
    tasks: Callable[[str, SourceOptions, int], list[SourceOptions]] | None = None  # its tasks (None: one)
    remote: bool = False  # a source may be a URL (fsspec)
    needs: tuple[str, str] | None = None  # (the module it reads with, the extra bringing it)

    def options_of(self, given: SourceOptions | Mapping[str, Any] | None) -> SourceOptions:
        """``given`` checked as this format's options (``SourceOptions.of``)."""
        return SourceOptions.of(self.name, self.options, given)


# -- LeRobot ---------------------------------------------------------------------------------
def _lerobot(path: str, options: SourceOptions) -> Episodes:
    from rayform.converters.lerobot import iter_lerobot

    return iter_lerobot(path, options.mapping, options.allow_missing, options.decode_video, options.episodes,
                        options.storage_options)


def _lerobot_tasks(path: str, options: SourceOptions, workers: int) -> list[SourceOptions]:
    """A dataset's episodes in runs of at most ``EPISODES_PER_TASK`` (as many runs as keep
    ``workers`` busy)."""
    if options.episodes is not None:
        return [options]
    from rayform.converters.lerobot import LeRobotDataset

    try:
        count = len(LeRobotDataset(path, options.mapping, options.storage_options).select(options.allow_missing))
    except RayformError:
        return [options]  # its task says what is wrong, naming the source
    per = max(1, min(EPISODES_PER_TASK, -(-count // (4 * workers))))
    return [options.with_part(episodes=(first, min(count, first + per))) for first in range(0, count, per)] or [options]


def _describe_lerobot(path: str, options: SourceOptions) -> list[str]:
    from rayform.converters.lerobot import LeRobotDataset

    ds = LeRobotDataset(path, options.mapping, options.storage_options)
    episodes = ds.episodes()
    present = [e for e in episodes if not ds.missing(e)]
    frames = sum(e.length for e in present)
    lines = [f"{path}: LeRobot {ds.version}, robot {ds.info.get('robot_type')}, {ds.fps:g} fps, "
             f"{len(episodes)} episodes in the meta, {len(present)} present ({frames} frames, "
             f"{frames / ds.fps:.1f} s)"]
    for feature, spec in ds.features.items():
        target = ds.mapping.get(feature) or "(skipped)"
        lines.append(f"  {feature:32} {spec.get('dtype'):8} {str(spec.get('shape')):14} -> {target}")
    return lines


# -- HDF5 ------------------------------------------------------------------------------------
def _hdf5(path: str, options: SourceOptions) -> Episodes:
    from rayform.converters.hdf5 import iter_hdf5

    return _renamed(path, iter_hdf5(Path(path), options.fps), options.mapping)


def _renamed(path: str, episodes: Episodes, mapping: Mapping[str, str | None]) -> Episodes:
    """An HDF5 file's streams under the user's names (its own names are the defaults)."""
    for name, streams, meta in episodes:
        names = StreamNames(path, lambda stream: stream, mapping, "stream").table(s.name for s in streams)
        yield name, [dataclasses.replace(s, name=new) for s in streams if (new := names[s.name]) is not None], meta


def _describe_hdf5(path: str, _options: SourceOptions) -> list[str]:
    from rayform.converters.hdf5 import _open, detect

    lines = [f"{path}: HDF5, {detect(Path(path))} layout"]
    with _open(Path(path)) as f:
        def visit(name: str, obj: Any) -> None:
            if hasattr(obj, "shape"):
                lines.append(f"  /{name:40} {str(obj.shape):18} {obj.dtype}")
        f.visititems(visit)
    return lines


# -- ROS -------------------------------------------------------------------------------------
def _ros(path: str, options: SourceOptions) -> Episodes:
    from rayform.converters.rosbag import read_bag

    yield read_bag(Path(path), options.mapping, options.stamp, list(options.joints) if options.joints else None)


def _describe_ros(path: str, _options: SourceOptions) -> list[str]:
    from rayform.converters.rosbag import describe_bag

    return describe_bag(Path(path))


# -- RLDS ------------------------------------------------------------------------------------
def _rlds(path: str, options: SourceOptions) -> Episodes:
    from rayform.converters.rlds import iter_rlds

    return iter_rlds(path, options)


def _rlds_tasks(path: str, options: SourceOptions, _workers: int) -> list[SourceOptions]:
    """A dataset's shards, one task each (the schema read once, handed to every task)."""
    if options.shard is not None:
        return [options]
    from rayform.converters.rlds import RldsDataset

    try:
        ds = RldsDataset(path, options.mapping, options.storage_options, options.fps, options.task_key)
        shards = ds.shards(list(options.splits) if options.splits else None)
    except RayformError:
        return [options]  # its task says what is wrong, naming the source
    return [options.with_part(shard=(s.split, s.index), docs=ds.docs) for s in shards if s.episodes] or [options]


def _describe_rlds(path: str, options: SourceOptions) -> list[str]:
    from rayform.converters.rlds import describe

    return describe(path, options)


FORMATS: dict[str, SourceFormat] = {f.name: f for f in (
    SourceFormat("lerobot", _lerobot, _describe_lerobot, ("storage_options", "allow_missing", "decode_video"),
                 _lerobot_tasks, remote=True),
    SourceFormat("rlds", _rlds, _describe_rlds, ("fps", "storage_options", "splits", "task_key"), _rlds_tasks,
                 remote=True, needs=("google.protobuf", "rlds")),
    SourceFormat("hdf5", _hdf5, _describe_hdf5, ("fps",), needs=("h5py", "hdf5")),
    SourceFormat("ros", _ros, _describe_ros, ("stamp", "joints"), needs=("rosbags", "ros")),
)}


def source_format(name: str) -> SourceFormat:
    """The format called ``name``, its extra checked: one line naming the ``pip install`` where
    the library it reads with is absent."""
    import importlib.util

    from rayform.errors import InvalidInput

    fmt = FORMATS.get(name)
    if fmt is None:
        raise InvalidInput(f"format {name!r}: one of {', '.join(sorted(FORMATS))}")
    if fmt.needs is not None:
        module, extra = fmt.needs
        if importlib.util.find_spec(module.split(".")[0]) is None or importlib.util.find_spec(module) is None:
            raise InvalidInput(f"ingest {name} needs {module}: pip install 'rayform[{extra}]'")
    return fmt


def describe(name: str, path: str | os.PathLike[str], fps: float | None = None,
             options: SourceOptions | Mapping[str, Any] | None = None) -> list[str]:
    """What a source holds, before converting it: one line per feature or dataset (``fps``:
    the rate where the source does not say it)."""
    fmt = source_format(name)
    options = fmt.options_of(options)
    if fps is not None and "fps" in fmt.options:
        options = dataclasses.replace(options, fps=fps)
    return fmt.describe(os.fspath(path), options)
