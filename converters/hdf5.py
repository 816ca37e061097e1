"""HDF5 episode files (ALOHA/ACT and robomimic layouts) into segments, read with h5py.

ALOHA/ACT, one episode per file::

    /observations/images/<cam>   (N, H, W, 3) uint8, or JPEG bytes padded to (N, L) with
                                 /compress_len (cams, N) giving each frame's length
    /observations/qpos, qvel, effort   (N, J)
    /action                            (N, J)

robomimic, one episode per ``/data/demo_<i>``::

    /data/demo_<i>/obs/<key>     (N, ...) — ``*_image`` keys (N, H, W, 3) uint8
    /data/demo_<i>/actions       (N, A)

Frames are evenly spaced at ``fps`` (given, else the file's ``fps`` / ``control_freq``
attribute). Raw frames are kept raw; compressed frames keep their JPEG bytes.
Streams: ``<cam>/rgb``, ``joints/position`` (qpos), ``joints/velocity``, ``joints/effort``,
``action/value``; robomimic: ``<key without _image>/rgb``, ``obs/<key>``, ``action/value``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rayform.errors import InvalidInput
from rayform.pack.spec import check_fps
from rayform.recordings.streams import ArrayStream, ImageStream, Stream

NS = 1_000_000_000
MAX_DATASET_BYTES = 8 << 30  # a dataset claiming more is refused before it is read
ALOHA_ARRAYS = {"qpos": "joints/position", "qvel": "joints/velocity", "effort": "joints/effort"}


def _open(path: Path) -> Any:
    import h5py

    if Path(path).is_dir():
        raise InvalidInput(f"{path}: a folder; ingest hdf5 takes HDF5 files (e.g. {path}/*.hdf5)")
    try:
        return h5py.File(path, "r")
    except OSError as e:  # h5py's message runs to several lines of HDF5's internals: the first says it
        raise InvalidInput(f"{path}: not a readable HDF5 file ({str(e).splitlines()[0][:160]})") from None


def _fps(f: Any, path: Path, fps: float | None) -> float:
    if fps is not None:
        return check_fps(fps, "--fps")
    for attrs in (f.attrs, f["data"].attrs if "data" in f else {}):
        for key in ("fps", "control_freq", "frequency"):
            if key in attrs:
                return _attr_fps(attrs[key], f"{path}: attribute {key}")
        if "env_args" in attrs:
            try:
                kwargs = json.loads(attrs["env_args"]).get("env_kwargs", {})
                freq = kwargs.get("control_freq")
            except (ValueError, AttributeError, TypeError):
                freq = None  # not robomimic's env_args: no rate to read there
            if freq is not None:
                return _attr_fps(freq, f"{path}: env_args control_freq")
    raise InvalidInput(f"{path}: no fps attribute; pass --fps")


def _attr_fps(value: Any, what: str) -> float:
    try:
        value = float(np.asarray(value).reshape(()))
    except (TypeError, ValueError):
        raise InvalidInput(f"{what}: {str(value)[:40]} is not a frame rate; pass --fps") from None
    return check_fps(value, what)


def _stamps(n: int, fps: float) -> np.ndarray:
    return np.round(np.arange(n) * (NS / fps)).astype(np.int64)


def _read(ds: Any, path: Path, name: str) -> np.ndarray:
    """A dataset's values, read only if every byte of it lives in this file and its size is sane."""
    import h5py

    if not isinstance(ds, h5py.Dataset):
        raise InvalidInput(f"{path}: {name} is not a dataset")
    if ds.external or ds.is_virtual:
        # external raw storage or a virtual dataset maps other files' bytes in: never followed
        raise InvalidInput(f"{path}: {name} keeps its data in other files (external or virtual storage); "
                           "only self-contained HDF5 files are read")
    if ds.dtype.kind not in "biufSV" or ds.dtype.hasobject:
        raise InvalidInput(f"{path}: {name} has dtype {ds.dtype}, not numeric or bytes")
    if ds.size * ds.dtype.itemsize > MAX_DATASET_BYTES:
        raise InvalidInput(f"{path}: {name} claims {ds.shape} {ds.dtype} "
                           f"({ds.size * ds.dtype.itemsize / 2**30:.1f} GiB), more than {MAX_DATASET_BYTES >> 30} GiB")
    try:
        return np.asarray(ds[()])
    except OSError as e:  # a truncated file fails here, on the data, not on open
        raise InvalidInput(f"{path}: cannot read {name} ({e})") from None


def _read_at(group: Any, key: str, path: Path, name: str) -> np.ndarray:
    """The values of the dataset ``group[key]`` (``name`` in messages), read as ``_read`` reads."""
    return _read(_member(group, key, path, name), path, name)


def _member(group: Any, key: str, path: Path, name: str) -> Any:
    """``group[key]``, refusing links that lead out of this file (external links)."""
    import h5py

    link = group.get(key, getlink=True)
    if link is None:
        raise InvalidInput(f"{path}: no {name}")
    if isinstance(link, h5py.ExternalLink):
        raise InvalidInput(f"{path}: {name} is a link into another file ({link.filename}); not followed")
    return group[key]


def detect(path: Path) -> str:
    with _open(path) as f:
        if "observations" in f and "action" in f:
            return "aloha"
        if "data" in f and any(k.startswith("demo") for k in f["data"]):
            return "robomimic"
    raise InvalidInput(f"{path}: neither the ALOHA (/observations, /action) nor the robomimic (/data/demo_*) layout")


def iter_aloha(path: str | Path, fps: float | None = None) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
    path = Path(path)
    with _open(path) as f:
        rate = _fps(f, path, fps)
        action = _read_at(f, "action", path, "/action")
        n = len(action)
        t = _stamps(n, rate)
        streams: list[Stream] = []
        obs = _member(f, "observations", path, "/observations")
        lengths = _read_at(f, "compress_len", path, "/compress_len") if "compress_len" in f else None
        images = _member(obs, "images", path, "/observations/images") if "images" in obs else {}
        for i, cam in enumerate(sorted(images)):
            data = _read_at(images, cam, path, f"/observations/images/{cam}")
            if len(data) != n:
                raise InvalidInput(f"{path}: {len(data)} frames of {cam} for {n} actions")
            if data.ndim == 2:  # JPEG bytes, zero-padded
                if lengths is None:
                    raise InvalidInput(f"{path}: /observations/images/{cam} is compressed but /compress_len is missing")
                frames = [bytes(data[k, : int(lengths[i, k])]) for k in range(n)]
                streams.append(ImageStream(f"{cam}/rgb", t, frames))
            else:
                streams.append(ImageStream(f"{cam}/rgb", t, data))
        for key, name in ALOHA_ARRAYS.items():
            if key in obs:
                values = _read_at(obs, key, path, f"/observations/{key}")
                streams.append(ArrayStream(name, t, values, units="rad" if key == "qpos" else None))
        streams.append(ArrayStream("action/value", t, action))
        meta = {"source": "aloha hdf5", "file": path.name, "fps": rate, "sim": bool(f.attrs.get("sim", False))}
    yield path.stem, streams, meta


def iter_robomimic(path: str | Path, fps: float | None = None) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
    path = Path(path)
    with _open(path) as f:
        rate = _fps(f, path, fps)
        data = _member(f, "data", path, "/data")
        demos = sorted(data, key=lambda k: int(k.split("_")[-1]) if k.split("_")[-1].isdigit() else k)
        for demo in demos:
            g = _member(data, demo, path, f"/data/{demo}")
            actions = _read_at(g, "actions", path, f"/data/{demo}/actions")
            t = _stamps(len(actions), rate)
            streams: list[Stream] = []
            group = _member(g, "obs", path, f"/data/{demo}/obs") if "obs" in g else {}
            for key in sorted(group):
                values = _read_at(group, key, path, f"/data/{demo}/obs/{key}")
                if key.endswith("_image") or (values.ndim == 4 and values.dtype == np.uint8):
                    streams.append(ImageStream(f"{key.removesuffix('_image')}/rgb", t, values))
                else:
                    streams.append(ArrayStream(f"obs/{key}", t, values if values.ndim > 1 else values[:, None]))
            streams.append(ArrayStream("action/value", t, actions))
            yield f"{path.stem}_{demo}", streams, {"source": "robomimic hdf5", "file": path.name, "demo": demo,
                                                    "fps": rate}


def iter_hdf5(path: str | Path, fps: float | None = None) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
    layout = detect(Path(path))
    return iter_aloha(path, fps) if layout == "aloha" else iter_robomimic(path, fps)
