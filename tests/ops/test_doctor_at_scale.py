"""Health at the scale the issue tells it: 1,000 episodes of real footage (the G1 robot's head
camera and the SO-101's wrist camera from ../shared, and the G1's recorded joints; synthetic
frames and motion where that data is absent), two episodes of each of the ten planted kinds
among them. ``client.doctor`` flags every planted episode with its kind and time, and at most
1% of the clean ones."""

from __future__ import annotations

import glob

import numpy as np
import pytest
from conftest import REAL_DATA, moving_texture
from planted import KINDS, plant

import rayform
from rayform.codec import imagecodec
from rayform.recordings.streams import ArrayStream, ImageStream, PoseStream

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


@pytest.mark.slow
def test_doctor_finds_every_planted_kind_among_a_thousand_real_episodes_and_few_clean_ones(tmp_path):
    heads, wrists, motion = _footage(G1, 1), _footage(SO101, 2), _motion()
    planted = {e: KINDS[i // 2] for i, e in enumerate(range(5, EPISODES, EPISODES // (2 * len(KINDS))))}
    assert len(planted) == 2 * len(KINDS)
    client = rayform.Client(tmp_path / "store")
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

    found = client.doctor(site="lab", progress=False)
    assert found.episodes == EPISODES and found.measured_now == 0
    by_name = {c.name: c for c in found.flagged}
    for name, (kind, at) in where.items():
        assert name in by_name, f"{name} ({kind}) is not flagged"
        hits = [f for f in by_name[name].findings if f["kind"] == kind]
        assert hits, f"{name}: planted {kind}, found {[f['kind'] for f in by_name[name].findings]}"
        if kind not in ("missing_stream", "duration", "constant"):  # those are of the whole episode
            t = (hits[0]["start_ns"] - by_name[name].start_ns) / 1e9
            assert abs(t - at) < 0.2, f"{name}: {kind} at {t:.2f} s, planted at {at:.2f} s"
    clean_flagged = sorted(set(by_name) - set(where))
    assert len(clean_flagged) <= 0.01 * (EPISODES - len(where)), \
        [(n, [f["kind"] for f in by_name[n].findings]) for n in clean_flagged[:10]]
    assert set(found.kinds) >= set(KINDS)
