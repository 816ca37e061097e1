"""Episodes with a planted defect of each kind the health signals know (``tests/ops``), and a
store's catalog as it was before health signals (rows without them)."""

from __future__ import annotations

import dataclasses
import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from conftest import REAL_DATA, moving_texture

import rayform
from rayform.codec import imagecodec
from rayform.recordings.streams import ArrayStream, ImageStream, PoseStream

KINDS = ["frozen", "blank", "dropped", "gap", "duplicate_time", "constant", "spike", "pose_jump", "missing_stream",
         "duration"]


def plant(kind: str, streams: list) -> tuple[list, float]:
    """The streams with a defect of ``kind``; and the time (s from the stream's start) it is at."""
    by = {s.name: s for s in streams}
    cam, joints, pose = by["cam0/rgb"], by["joints/position"], by["ee/pose"]
    t_cam = np.asarray(cam.timestamps)
    if kind == "frozen":
        frames = list(cam.frames)
        frames[20:70] = [frames[20]] * 50
        new = dataclasses.replace(cam, frames=frames)
        at = (t_cam[20] - t_cam[0]) / 1e9
    elif kind == "blank":
        frames = list(cam.frames)
        black = imagecodec.encode_jpeg(np.zeros((32, 32, 3), np.uint8), 90)
        frames[40:43] = [black] * 3
        new = dataclasses.replace(cam, frames=frames)
        at = (t_cam[40] - t_cam[0]) / 1e9
    elif kind in ("dropped", "gap"):
        keep = np.ones(len(t_cam), bool)
        keep[30:60] = False  # a second of frames gone
        new = dataclasses.replace(cam, timestamps=t_cam[keep], frames=[f for f, k in zip(cam.frames, keep) if k])
        at = (t_cam[29] - t_cam[0]) / 1e9
    elif kind == "duplicate_time":
        t = np.asarray(joints.timestamps).copy()
        t[101] = t[100]
        new = dataclasses.replace(joints, timestamps=t)
        at = (t[100] - t[0]) / 1e9
    elif kind == "constant":
        values = np.asarray(joints.values).copy()
        values[:, 3] = values[0, 3]
        new = dataclasses.replace(joints, values=values)
        at = 0.0
    elif kind == "spike":
        values = np.asarray(joints.values).copy()
        values[150:155, 2] = 1e6
        new = dataclasses.replace(joints, values=values)
        at = (joints.timestamps[150] - joints.timestamps[0]) / 1e9
    elif kind == "pose_jump":
        values = np.asarray(pose.values).copy()
        values[120:, :3] += 5.0
        new = dataclasses.replace(pose, values=values)
        at = (pose.timestamps[119] - pose.timestamps[0]) / 1e9
    elif kind == "missing_stream":
        return [s for s in streams if s.name != "wrist/rgb"], 0.0
    elif kind == "duration":
        cut = lambda s: dataclasses.replace(s, timestamps=np.asarray(s.timestamps)[:len(s.timestamps) // 6],
                                            **{("frames" if isinstance(s, ImageStream) else "values"):
                                               (s.frames if isinstance(s, ImageStream) else s.values)[
                                                   :len(s.timestamps) // 6]})
        return [cut(s) for s in streams], 0.0
    else:
        raise AssertionError(kind)
    return [new if s.name == new.name else s for s in streams], at


KINDS = ["frozen", "blank", "dropped", "gap", "duplicate_time", "constant", "spike", "pose_jump", "missing_stream",
         "duration"]


def rewrite_catalog_parts(client: rayform.Client, change: Callable[[Any], Any]) -> None:
    """Rewrite each catalog part of a local store as ``change`` makes its table (a pyarrow Table)
    and point its ref at the new part: a catalog as an older rayform, or a hostile one, wrote it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rayform.recordings.catalog_parts import ref_key

    root = Path(client.store.root)
    for part in client.segments.catalog.parts.live():
        table = pq.read_table(pa.BufferReader(client.store.get_blob(part.part, "part")))
        data = pa.BufferOutputStream()
        pq.write_table(change(table), data)
        digest = client.store.put_blob(data.getvalue().to_pybytes())
        doc = json.loads(Path(root / ref_key(part.site, part.key)).read_text())
        Path(root / ref_key(part.site, part.key)).write_text(json.dumps({**doc, "part": digest}))


def without_health(client: rayform.Client) -> None:
    """Each catalog part without the health columns: rows as a store ingested before health
    signals has them."""
    from rayform.recordings.catalog_parts import COLUMNS, OPTIONAL

    rewrite_catalog_parts(client, lambda table: table.select([c for c in COLUMNS if c not in OPTIONAL]))


# -- a store of real footage at scale: the G1 robot's head camera and the SO-101's wrist camera
# from ../shared, and the G1's recorded joints (synthetic frames and motion where that data is absent)
EPISODES = 1000
SECONDS = 4.0
JOINT_HZ, CAMERA_HZ = 50, 20
SIZE = 32
EPOCH_NS = 1_700_000_000 * 10**9
G1 = REAL_DATA / "lerobot_v21_unitree_g1_subset"
SO101 = REAL_DATA / "lerobot_v30_so101_ros2_example"
MOVING = [8, 9, 10, 11, 12, 13, 20, 21]  # the G1's arm and hand joints that move in every episode


def _footage(root, seed: int) -> list[bytes]:
    """Every frame of a dataset's videos at SIZE, as JPEG: the real camera's, or a panning texture."""
    frames = []
    paths = sorted(glob.glob(str(root / "videos" / "**" / "*.mp4"), recursive=True))
    if paths:
        import av

        for path in paths:
            with av.open(path) as container:
                frames += [imagecodec.resize(f.to_ndarray(format="rgb24"), (SIZE, SIZE)) for f in container.decode(video=0)]
    else:
        frames = list(moving_texture(400, SIZE, seed))
    return [imagecodec.encode_jpeg(np.ascontiguousarray(f), 90) for f in frames]


def _motion() -> np.ndarray:
    """Joint positions, one row a sample: the G1's recorded state, or smooth random motion."""
    paths = sorted(glob.glob(str(G1 / "data" / "**" / "*.parquet"), recursive=True))
    if paths:
        import pyarrow.parquet as pq

        return np.concatenate([np.stack(pq.read_table(p).column("observation.state").to_numpy(zero_copy_only=False))
                               [:, MOVING] for p in paths]).astype(np.float32)
    t = np.arange(800) / 30
    rng = np.random.default_rng(0)
    return (np.sin(t[:, None] * rng.uniform(0.3, 1.5, 8) + rng.uniform(0, 6, 8)) * 0.4).astype(np.float32)


def _stamps(rng: np.random.Generator, start: int, hz: float) -> np.ndarray:
    n = int(SECONDS * hz)
    jitter = rng.normal(0, 0.2e6, n).clip(-1e6, 1e6)
    return start + (np.arange(n) * (1e9 / hz) + jitter).astype(np.int64)


def _episode(e: int, heads: list[bytes], wrists: list[bytes], motion: np.ndarray) -> list:
    rng = np.random.default_rng([7, e])
    start = EPOCH_NS + e * 120 * 10**9
    cam_t, joint_t = _stamps(rng, start, CAMERA_HZ), _stamps(rng, start + 1_000_000, JOINT_HZ)
    n, k = len(cam_t), len(joint_t)
    a, b, c = (int(rng.integers(0, len(x) - m)) for x, m in ((heads, n), (wrists, n), (motion, k)))
    q = motion[c:c + k] + rng.normal(0, 1e-4, (k, motion.shape[1])).astype(np.float32)  # a sensor's noise
    position = np.cumsum(rng.normal(0, 2e-3, (k, 3)), axis=0) + [0.4, 0.0, 0.3]
    pose = np.hstack([position, np.tile([0.0, 0.0, 0.0, 1.0], (k, 1))])
    return [ImageStream("cam0/rgb", cam_t, heads[a:a + n]), ImageStream("wrist/rgb", cam_t + 3_000_000, wrists[b:b + n]),
            ArrayStream("joints/position", joint_t, q, units="rad"), PoseStream("ee/pose", joint_t, pose, frame="ros")]


def real_store(root: Path) -> tuple[rayform.Client, dict[str, tuple[str, float]]]:
    """EPISODES episodes at site "lab", two of each planted kind among them (spread over the
    list); the planted ones' names, each with its kind and the time it is at."""
    heads, wrists, motion = _footage(G1, 1), _footage(SO101, 2), _motion()
    planted = {e: KINDS[i // 2] for i, e in enumerate(range(5, EPISODES, EPISODES // (2 * len(KINDS))))}
    client = rayform.Client(root)
    where: dict[str, tuple[str, float]] = {}
    for first in range(0, EPISODES, 250):  # in four writes, as four ingests would
        batch = []
        for e in range(first, first + 250):
            streams = _episode(e, heads, wrists, motion)
            if e in planted:
                streams, at = plant(planted[e], streams)
                where[f"episode_{e:04d}"] = (planted[e], at)
            batch.append(("lab", f"episode_{e:04d}", streams, {"task": "pick"}))
        client.segments.add_many(batch)
    return client, where
