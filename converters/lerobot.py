"""LeRobot datasets (v2.1 per-episode files, v3.0 chunked files) into segments.

One segment per episode. Video features are kept as recorded (``VideoStream``: the AV1,
H.264 or HEVC packets of the episode's window, not decoded: ``video_source``), or, with
``decode_video``, decoded with PyAV and stored as JPEG frames; state, action and other
numeric features become array streams with their names; tasks and the robot type go into
the segment's metadata. Timestamps are int64 ns from ``frame_index / fps`` (exact, no
float drift), checked against the recorded float ``timestamp`` column.

Default stream names: ``observation.images.<cam>`` -> ``<cam>/rgb``, any other feature's
dots become slashes (``observation.state`` -> ``observation/state``), and ``action`` ->
``action/value`` (``action`` itself names the training target). ``mapping`` overrides any
of them (a feature mapped to ``None`` is skipped).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import IO, Any

import numpy as np

from rayform.codec import imagecodec
from rayform.codec.video import STRICT
from rayform.converters.source_files import SourceFiles
from rayform.converters.stream_names import StreamNames
from rayform.converters.video_source import demux_video
from rayform.errors import InvalidInput
from rayform.pack.spec import check_fps
from rayform.recordings.streams import RESERVED, ArrayStream, ImageStream, Stream

SKIP_FEATURES = {"timestamp", "frame_index", "episode_index", "index", "task_index"}
NS = 1_000_000_000
MAX_STAMP_ERROR_NS = 2_000_000  # recorded float timestamps may differ from frame/fps by float32 error only


@dataclass(frozen=True)
class Episode:
    index: int
    length: int
    tasks: tuple[str, ...]
    data_file: PurePath
    row_range: tuple[int, int] | None  # v3.0: rows of the shared parquet; v2.1: the whole file
    videos: dict[str, tuple[PurePath, float, float | None]]  # feature -> (file, from_s, to_s)


def _json(files: SourceFiles, path: PurePath) -> Any:
    try:
        return json.loads(files.read_text(path))
    except FileNotFoundError:
        raise InvalidInput(f"{path}: missing (not a LeRobot dataset?)") from None
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{path}: not valid JSON ({e})") from None


def _jsonl(files: SourceFiles, path: PurePath) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in files.read_text(path).splitlines() if line.strip()]
    except FileNotFoundError:
        raise InvalidInput(f"{path}: missing (not a LeRobot v2.1 dataset?)") from None
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{path}: not valid JSON lines ({e})") from None


_FIELD = re.compile(r"\{([a-z_]+)(?::(0?\d{0,2}d))?\}")


def source_path(files: SourceFiles, template: Any, what: str, **values: int | str) -> PurePath:
    """``root / template`` with ``{name}`` / ``{name:03d}`` filled in, and nothing else.

    LeRobot's ``data_path`` and ``video_path`` come from the dataset's ``info.json``: they are
    never handed to ``str.format`` (which would evaluate ``{x.__class__}``), and a path that
    leads out of the dataset's folder is refused.
    """
    root = files.root
    if not isinstance(template, str) or len(template) > 512:
        raise InvalidInput(f"{root}/meta/info.json: {what} is not a path template")

    def fill(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise InvalidInput(f"{root}/meta/info.json: {what} {template!r} names {{{m.group(1)}}}, "
                               f"which is not one of {sorted(values)}")
        return format(values[m.group(1)], m.group(2) or "")

    rest = _FIELD.sub("", template)
    if "{" in rest or "}" in rest:
        raise InvalidInput(f"{root}/meta/info.json: {what} {template!r}: only {{name}} and {{name:03d}} fields are read")
    return files.inside(root / _FIELD.sub(fill, template), f"meta/info.json's {what} {template!r}")


def feature_names(feature: Mapping[str, Any]) -> list[str] | None:
    """Joint names from the several shapes LeRobot writes them in (list, nested list, dict)."""
    names = feature.get("names")
    if isinstance(names, dict):
        names = next(iter(names.values()), None)
    while isinstance(names, list) and len(names) == 1 and isinstance(names[0], list):
        names = names[0]
    shape = feature.get("shape") or []
    if isinstance(names, list) and all(isinstance(n, str) for n in names) and len(shape) == 1 and len(names) == shape[0]:
        return names
    return None


def default_stream_name(feature: str) -> str | None:
    if feature in SKIP_FEATURES:
        return None
    if feature.startswith("observation.images."):
        return feature[len("observation.images."):].replace(".", "_") + "/rgb"
    name = feature.replace(".", "/")
    return f"{name}/value" if name in RESERVED else name


class LeRobotDataset:
    """A LeRobot dataset on disk, read with pyarrow and PyAV."""

    def __init__(self, root: str | os.PathLike[str], mapping: Mapping[str, str | None] | None = None,
                 storage_options: dict[str, Any] | None = None):
        self.files = SourceFiles(root, storage_options)
        self.root = self.files.root
        self.info = _json(self.files, self.root / "meta" / "info.json")
        self.version = str(self.info.get("codebase_version", ""))
        if not (self.version.startswith("v2") or self.version.startswith("v3")):
            raise InvalidInput(f"{self.root}: LeRobot {self.version or 'unknown version'}; v2.1 and v3.0 are read")
        self.fps = check_fps(self.info.get("fps"), f"{self.root}/meta/info.json: fps")
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.mapping = StreamNames(str(self.root), default_stream_name, mapping).table(self.features)
        self.video_keys = [f for f, v in self.features.items() if v.get("dtype") == "video"]
        self.tasks = self._tasks()
        self._table: tuple[PurePath, Any] | None = None

    def _tasks(self) -> dict[int, str]:
        if self.version.startswith("v2"):
            return {t["task_index"]: t["task"] for t in _jsonl(self.files, self.root / "meta" / "tasks.jsonl")}
        import pyarrow.parquet as pq

        t = pq.read_table(self.files.open(self.root / "meta" / "tasks.parquet"))
        cols = t.column_names
        # written from pandas, the task text is the frame's index column
        text = "task" if "task" in cols else "__index_level_0__"
        return dict(zip(t.column("task_index").to_pylist(), t.column(text).to_pylist()))

    def episodes(self) -> list[Episode]:
        if self.version.startswith("v2"):
            return self._episodes_v2()
        return self._episodes_v3()

    def _episodes_v2(self) -> list[Episode]:
        chunk = int(self.info.get("chunks_size", 1000))
        out = []
        for e in _jsonl(self.files, self.root / "meta" / "episodes.jsonl"):
            i = int(e["episode_index"])
            data = source_path(self.files, self.info.get("data_path"), "data_path", episode_chunk=i // chunk,
                               episode_index=i)
            videos: dict[str, tuple[PurePath, float, float | None]] = {
                k: (source_path(self.files, self.info.get("video_path"), "video_path", episode_chunk=i // chunk,
                                video_key=k, episode_index=i), 0.0, None)
                for k in self.video_keys
            }
            out.append(Episode(i, int(e["length"]), tuple(e.get("tasks", ())), data, None, videos))
        return out

    def _episodes_v3(self) -> list[Episode]:
        import pyarrow.parquet as pq

        files = self.files.glob(self.root / "meta" / "episodes", ".parquet")
        if not files:
            raise InvalidInput(f"{self.root}/meta/episodes: no episode parquet files")
        out = []
        for f in files:
            for e in pq.read_table(self.files.open(f)).to_pylist():
                data = source_path(self.files, self.info.get("data_path"), "data_path",
                                   chunk_index=int(e["data/chunk_index"]), file_index=int(e["data/file_index"]))
                videos: dict[str, tuple[PurePath, float, float | None]] = {}
                for k in self.video_keys:
                    path = source_path(self.files, self.info.get("video_path"), "video_path", video_key=k,
                                       chunk_index=int(e[f"videos/{k}/chunk_index"]),
                                       file_index=int(e[f"videos/{k}/file_index"]))
                    videos[k] = (path, float(e[f"videos/{k}/from_timestamp"]), float(e[f"videos/{k}/to_timestamp"]))
                out.append(Episode(int(e["episode_index"]), int(e["length"]), tuple(e.get("tasks") or ()), data,
                                   (int(e["dataset_from_index"]), int(e["dataset_to_index"])), videos))
        return out

    def _data(self, path: PurePath) -> Any:
        """A data file's table (v3.0 files hold many episodes: read once for all of them)."""
        import pyarrow.parquet as pq

        if self._table is None or self._table[0] != path:
            self._table = (path, pq.read_table(self.files.open(path)))
        return self._table[1]

    def missing(self, episode: Episode) -> list[PurePath]:
        paths = [episode.data_file] + [v[0] for v in episode.videos.values()]
        return [p for p in paths if not self.files.is_file(p)]

    def select(self, allow_missing: bool = False) -> list[Episode]:
        """The episodes to convert; an episode whose files are absent is an error unless allowed."""
        episodes: list[Episode] = []
        absent: list[tuple[Episode, list[PurePath]]] = []
        for e in self.episodes():
            gone = self.missing(e)
            if gone:
                absent.append((e, gone))
            else:
                episodes.append(e)
        if absent and not allow_missing:
            first, gone = absent[0]
            raise InvalidInput(
                f"{self.root}: the meta lists {len(absent)} episode(s) whose files are absent "
                f"(episode {first.index}: {gone[0].relative_to(self.files.inside(self.root, 'its root'))}). "
                "Pass --allow-missing to convert the episodes that are there"
            )
        return episodes

    def read_episode(self, e: Episode, jpeg_quality: int = 95, decode_video: bool = False
                     ) -> tuple[str, list[Stream], dict[str, Any]]:
        table = self._data(e.data_file)
        if e.row_range is not None:
            idx = np.asarray(table.column("index").to_numpy())
            rows = np.flatnonzero((idx >= e.row_range[0]) & (idx < e.row_range[1]))
            table = table.take(rows)
        if table.num_rows != e.length:
            raise InvalidInput(f"{e.data_file}: episode {e.index} has {table.num_rows} rows, the meta says {e.length}")
        frame_index = np.asarray(table.column("frame_index").to_numpy(), np.int64)
        t_ns = np.round(frame_index * (NS / self.fps)).astype(np.int64)
        if "timestamp" in table.column_names:
            recorded = np.asarray(table.column("timestamp").to_numpy(), np.float64)
            worst = np.max(np.abs(np.round(recorded * NS).astype(np.int64) - t_ns)) if len(t_ns) else 0
            if worst > MAX_STAMP_ERROR_NS:
                t_ns = np.round(recorded * NS).astype(np.int64)  # irregular recording: trust the clock
        streams: list[Stream] = []
        for feature, name in self.mapping.items():
            if name is None:
                continue
            spec = self.features[feature]
            if spec.get("dtype") == "video" and decode_video:
                path, from_s, to_s = e.videos[feature]
                frames = decode_frames(self.files.open(path), path, from_s, to_s, expected=e.length, fps=self.fps,
                                       quality=jpeg_quality)
                streams.append(ImageStream(name, t_ns, frames, meta={"source": "video", **spec.get("info", {})}))
            elif spec.get("dtype") == "video":
                path, from_s, to_s = e.videos[feature]
                info = {k: v for k, v in spec.get("info", {}).items() if isinstance(v, (str, int, float, bool))}
                video = demux_video(self.files.open(path), path, name, (from_s, to_s), e.length, self.fps,
                                    int(t_ns[0]) if len(t_ns) else 0, meta=info)
                worst = np.max(np.abs(video.timestamps - t_ns)) if len(t_ns) else 0
                if worst > NS / self.fps / 2:
                    raise InvalidInput(f"{path}: episode {e.index}'s frames are up to {worst / 1e6:.1f} ms off its "
                                       "data's timestamps; ingest with --decode-video to take the data's")
                streams.append(video)
            elif spec.get("dtype") in ("image",):
                continue  # image features stored inside parquet: not in the formats we have seen
            elif feature in table.column_names:
                values = np.asarray(table.column(feature).to_pylist(), dtype=np.dtype(spec.get("dtype", "float32")))
                if values.ndim == 1:
                    values = values[:, None]
                streams.append(ArrayStream(name, t_ns, values, names=feature_names(spec),
                                           meta={"lerobot_feature": feature}))
        tasks = list(e.tasks) or sorted({self.tasks.get(i, "") for i in table.column("task_index").to_pylist()})
        meta = {"source": f"lerobot {self.version}", "episode_index": e.index, "tasks": tasks,
                "robot_type": self.info.get("robot_type"), "fps": self.fps}
        return f"{self.root.name}/episode_{e.index:06d}", streams, meta


def decode_frames(source: IO[bytes] | str, path: PurePath, from_s: float, to_s: float | None, expected: int,
                  fps: float, quality: int) -> list[bytes]:
    """The frames of ``[from_s, to_s)`` of a video file, as JPEG bytes."""
    import av

    frames: list[bytes] = []
    try:
        with av.open(source) as container:
            if not container.streams.video:
                raise InvalidInput(f"{path}: no video stream in it (a damaged file: the box that lists its streams "
                                   "is missing or zeroed)")
            stream = container.streams.video[0]
            stream.codec_context.options = dict(STRICT)  # damage is an error, never frames made up
            half = 0.5 / fps
            if from_s > 0:
                container.seek(int(max(0.0, from_s - 1.0) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.pts * stream.time_base)
                if t < from_s - half:
                    continue
                if to_s is not None and t >= to_s - half:
                    break
                if frame.is_corrupt:
                    raise InvalidInput(f"{path}: the video frame at {t:.3f} s is damaged (the decoder found errors "
                                       "in its bitstream)")
                frames.append(imagecodec.encode_jpeg(frame.to_ndarray(format="rgb24"), quality))
    except av.FFmpegError as e:
        raise InvalidInput(f"{path}: cannot decode the video ({e})") from e
    if len(frames) != expected:
        raise InvalidInput(f"{path}: {len(frames)} video frames in [{from_s:.3f}, {to_s}) s, the data has {expected}")
    return frames


def iter_lerobot(root: str | os.PathLike[str], mapping: Mapping[str, str | None] | None = None,
                 allow_missing: bool = False, decode_video: bool = False, episodes: tuple[int, int] | None = None,
                 storage_options: dict[str, Any] | None = None) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
    """The dataset's episodes (``episodes``: only ``[first, stop)`` of those present) as segments;
    ``root`` a folder or an fsspec URL (with ``storage_options``)."""
    ds = LeRobotDataset(root, mapping, storage_options)
    chosen = ds.select(allow_missing)
    for e in chosen[slice(*episodes)] if episodes is not None else chosen:
        yield ds.read_episode(e, decode_video=decode_video)
