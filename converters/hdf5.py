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

import numpy as np

from rayform.errors import InvalidInput
from rayform.streams import ArrayStream, ImageStream, Stream

NS = 1_000_000_000
ALOHA_ARRAYS = {"qpos": "joints/position", "qvel": "joints/velocity", "effort": "joints/effort"}


def _open(path: Path):
    import h5py

    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise InvalidInput(f"{path}: not a readable HDF5 file ({e})") from None


def _fps(f, path: Path, fps: float | None) -> float:
    if fps:
        return float(fps)
    for attrs in (f.attrs, f["data"].attrs if "data" in f else {}):
        for key in ("fps", "control_freq", "frequency"):
            if key in attrs:
                return float(attrs[key])
        if "env_args" in attrs:
            try:
                kwargs = json.loads(attrs["env_args"]).get("env_kwargs", {})
                if "control_freq" in kwargs:
                    return float(kwargs["control_freq"])
            except (ValueError, AttributeError):
                pass
    raise InvalidInput(f"{path}: no fps attribute; pass --fps")


def _stamps(n: int, fps: float) -> np.ndarray:
    return np.round(np.arange(n) * (NS / fps)).astype(np.int64)


def _read(ds, path: Path, name: str) -> np.ndarray:
    try:
        return ds[()]
    except OSError as e:  # a truncated file fails here, on the data, not on open
        raise InvalidInput(f"{path}: cannot read {name} ({e})") from None


def detect(path: Path) -> str:
    with _open(path) as f:
        if "observations" in f and "action" in f:
            return "aloha"
        if "data" in f and any(k.startswith("demo") for k in f["data"]):
            return "robomimic"
    raise InvalidInput(f"{path}: neither the ALOHA (/observations, /action) nor the robomimic (/data/demo_*) layout")


def iter_aloha(path: str | Path, fps: float | None = None) -> Iterator[tuple[str, list[Stream], dict]]:
    path = Path(path)
    with _open(path) as f:
        rate = _fps(f, path, fps)
        action = _read(f["action"], path, "/action")
        n = len(action)
        t = _stamps(n, rate)
        streams: list[Stream] = []
        obs = f["observations"]
        lengths = _read(f["compress_len"], path, "/compress_len") if "compress_len" in f else None
        for i, cam in enumerate(sorted(obs.get("images", {}))):
            data = _read(obs["images"][cam], path, f"/observations/images/{cam}")
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
                values = _read(obs[key], path, f"/observations/{key}")
                streams.append(ArrayStream(name, t, values, units="rad" if key == "qpos" else None))
        streams.append(ArrayStream("action/value", t, action))
        meta = {"source": "aloha hdf5", "file": path.name, "fps": rate, "sim": bool(f.attrs.get("sim", False))}
    yield path.stem, streams, meta


def iter_robomimic(path: str | Path, fps: float | None = None) -> Iterator[tuple[str, list[Stream], dict]]:
    path = Path(path)
    with _open(path) as f:
        rate = _fps(f, path, fps)
        demos = sorted(f["data"], key=lambda k: int(k.split("_")[-1]) if k.split("_")[-1].isdigit() else k)
        for demo in demos:
            g = f["data"][demo]
            actions = _read(g["actions"], path, f"/data/{demo}/actions")
            t = _stamps(len(actions), rate)
            streams: list[Stream] = []
            for key in sorted(g.get("obs", {})):
                values = _read(g["obs"][key], path, f"/data/{demo}/obs/{key}")
                if key.endswith("_image") or (values.ndim == 4 and values.dtype == np.uint8):
                    streams.append(ImageStream(f"{key.removesuffix('_image')}/rgb", t, values))
                else:
                    streams.append(ArrayStream(f"obs/{key}", t, values if values.ndim > 1 else values[:, None]))
            streams.append(ArrayStream("action/value", t, actions))
            yield f"{path.stem}_{demo}", streams, {"source": "robomimic hdf5", "file": path.name, "demo": demo,
                                                    "fps": rate}


def iter_hdf5(path: str | Path, fps: float | None = None) -> Iterator[tuple[str, list[Stream], dict]]:
    layout = detect(Path(path))
    return iter_aloha(path, fps) if layout == "aloha" else iter_robomimic(path, fps)
