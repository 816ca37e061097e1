"""A synthetic demo source: a simulated 7-joint arm with a gripper, seen by two cameras.

Deterministic by seed. Each episode has

- ``cam0/rgb``: a fixed camera over a textured table, 30 Hz, JPEG (10-30 KB at 224×224 q90),
  with a few dropped frames, as real USB cameras have;
- ``wrist/rgb``: a camera on the end effector, same rate, its own jitter;
- ``joints/position``: 7 joint angles (rad) and the gripper opening (0..1), 100 Hz;
- ``ee/pose``: end-effector position (m) and orientation (x, y, z, qx, qy, qz, qw), 100 Hz,
  in the ROS convention (x forward, y left, z up).

Timestamps are int64 ns with jitter, each stream at its own native rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rayform.client import Client
from rayform.codec import imagecodec
from rayform.errors import NotFound
from rayform.recordings.segment_writer import SegmentRef, segment_id
from rayform.recordings.streams import ArrayStream, ImageStream, PoseStream, Stream

EPOCH_NS = 1_760_000_000 * 10**9  # a fixed, plausible wall-clock start
NS = 10**9


@dataclass(frozen=True)
class DemoConfig:
    episodes: int = 6
    seconds: float = 10.0
    seed: int = 0
    joints: int = 7  # arm joints; the gripper is one more value
    image_size: int = 224
    jpeg_quality: int = 90
    camera_hz: float = 30.0
    joint_hz: float = 100.0
    frame_drop: float = 0.005  # fraction of camera frames lost


def _stamps(rng: np.random.Generator, start: int, seconds: float, hz: float, jitter_ns: float,
            drop: float = 0.0) -> np.ndarray:
    n = int(seconds * hz)
    t = start + np.round(np.arange(n) * (NS / hz) + rng.normal(0, jitter_ns, n)).astype(np.int64)
    t = np.sort(t)
    if drop:
        keep = rng.random(n) >= drop
        keep[0] = keep[-1] = True
        t = t[keep]
    return t


def _joint_motion(rng: np.random.Generator, joints: int) -> Callable[[np.ndarray], np.ndarray]:
    amp = rng.uniform(0.2, 0.8, joints)
    freq = rng.uniform(0.05, 0.4, joints)
    phase = rng.uniform(0, 2 * np.pi, joints)
    offset = rng.uniform(-0.5, 0.5, joints)
    grip_freq = rng.uniform(0.1, 0.3)

    def at(t_s: np.ndarray) -> np.ndarray:
        q = offset + amp * np.sin(2 * np.pi * freq * t_s[:, None] + phase)
        grip = 0.5 + 0.5 * np.sin(2 * np.pi * grip_freq * t_s)[:, None]
        return np.concatenate([q, grip], axis=1)

    return at


def _forward_kinematics(q: np.ndarray) -> np.ndarray:
    """A plausible (not exact) arm: base yaw, two pitch links, wrist pitch and roll."""
    yaw, shoulder, elbow = q[:, 0], q[:, 1], q[:, 3 % q.shape[1]]
    wrist = q[:, 5 % q.shape[1]]
    roll = q[:, 6 % q.shape[1]]
    l1, l2, h = 0.4, 0.35, 0.3
    r = 0.25 + l1 * np.cos(shoulder) + l2 * np.cos(shoulder + elbow)
    z = h + l1 * np.sin(shoulder) + l2 * np.sin(shoulder + elbow)
    pos = np.stack([r * np.cos(yaw), r * np.sin(yaw), z], axis=1)
    pitch = shoulder + elbow + wrist
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    quat = np.stack([
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
        cr * cp * cy + sr * sp * sy,
    ], axis=1)
    return np.concatenate([pos, quat / np.linalg.norm(quat, axis=1, keepdims=True)], axis=1)


class _Scene:
    """A textured table and a colored gripper marker, rendered from two viewpoints."""

    def __init__(self, rng: np.random.Generator, size: int):
        self.size = size
        big = 2 * size
        coarse = rng.integers(40, 200, (big // 16, big // 16, 3)).astype(np.float32)
        texture = np.kron(coarse, np.ones((16, 16, 1), np.float32))
        yy, xx = np.mgrid[0:big, 0:big]
        texture += 25 * np.sin(xx[..., None] / 7.0) * np.cos(yy[..., None] / 11.0)
        grain = rng.normal(0, 14, (big // 2, big // 2, 1)).astype(np.float32)  # wood-like fine grain
        texture += np.kron(grain, np.ones((2, 2, 1), np.float32))
        self.table = texture
        self.yy, self.xx = np.mgrid[0:size, 0:size]
        self.rng = rng

    def _finish(self, image: np.ndarray, u: float, v: float, radius: float, color: tuple[int, int, int],
                grip: float) -> np.ndarray:
        mask = (self.xx - u) ** 2 + (self.yy - v) ** 2 <= radius**2
        image[mask] = color
        bar = (np.abs(self.yy - v) < 2) & (np.abs(self.xx - u) < radius * (0.5 + grip))
        image[bar] = (250, 250, 250)
        image += self.rng.normal(0, 4.0, image.shape).astype(np.float32)  # sensor noise
        out: np.ndarray = np.clip(image, 0, 255).astype(np.uint8)
        return out

    def overhead(self, pose: np.ndarray, grip: float) -> np.ndarray:
        s = self.size
        image = self.table[s // 2 : s // 2 + s, s // 2 : s // 2 + s].copy()
        u = s / 2 + pose[1] * s * 0.6
        v = s / 2 - (pose[0] - 0.45) * s * 0.6
        return self._finish(image, u, v, 10 + 8 * pose[2], (220, 40, 40), grip)

    def wrist(self, pose: np.ndarray, grip: float) -> np.ndarray:
        s = self.size
        ox = int(np.clip(s / 2 + pose[1] * s * 0.8, 0, s - 1))
        oy = int(np.clip(s / 2 + (pose[0] - 0.45) * s * 0.8, 0, s - 1))
        image = self.table[oy : oy + s, ox : ox + s].copy()
        return self._finish(image, s / 2, s / 2 + 40 * (grip - 0.5), 30, (40, 160, 220), grip)


def demo_episode(config: DemoConfig, episode: int) -> tuple[str, list[Stream], dict[str, Any]]:
    """One episode's name, streams and metadata."""
    rng = np.random.default_rng([config.seed, episode])
    start = EPOCH_NS + episode * 120 * NS
    motion = _joint_motion(rng, config.joints)
    scene = _Scene(rng, config.image_size)

    joint_t = _stamps(rng, start, config.seconds, config.joint_hz, 0.2e6)
    q = motion((joint_t - start) / NS).astype(np.float32)
    pose = _forward_kinematics(q.astype(np.float64))

    streams: list[Stream] = []
    for name, view in (("cam0/rgb", scene.overhead), ("wrist/rgb", scene.wrist)):
        cam_t = _stamps(rng, start + int(rng.integers(0, 5_000_000)), config.seconds, config.camera_hz, 1e6,
                        config.frame_drop)
        cam_q = motion((cam_t - start) / NS)
        cam_pose = _forward_kinematics(cam_q)
        frames = [
            imagecodec.encode_jpeg(view(p, g), config.jpeg_quality) for p, g in zip(cam_pose, cam_q[:, -1])
        ]
        streams.append(ImageStream(name, cam_t, frames, meta={"fps_nominal": config.camera_hz}))
    names = [f"joint_{i}" for i in range(config.joints)] + ["gripper"]
    streams.append(ArrayStream("joints/position", joint_t, q, units="rad", names=names))
    streams.append(PoseStream("ee/pose", joint_t, pose, frame="ros"))
    meta = {"source": "rayform demo", "seed": config.seed, "episode": episode, "robot": "sim-arm-7dof",
            "demo": asdict(config)}
    return episode_name(episode), streams, meta


def episode_name(episode: int) -> str:
    return f"episode_{episode:04d}"


def demo_episodes(config: DemoConfig) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
    for episode in range(config.episodes):
        yield demo_episode(config, episode)


def ingest_demo(client: Client, site: str = "demo", config: DemoConfig = DemoConfig(),
                progress: bool = False) -> list[SegmentRef]:
    """Add the demo episodes to ``client``'s store at ``site``, all or nothing (as an ingest:
    each episode is stored as it is simulated, none visible until all are, and a failure or a
    Ctrl-C takes back what was written). An episode already there, made with the same config
    (its segment's meta says so), is reused, not simulated again: its content would be the
    same bytes."""
    from tqdm.auto import tqdm

    refs = []
    made = asdict(config)
    with client.segments.writing() as new:
        for episode in tqdm(range(config.episodes), desc="demo episodes", unit="episode", disable=not progress,
                            leave=False):
            name = episode_name(episode)
            try:
                found = client.segments.get(segment_id(site, name))
            except NotFound:
                found = None
            if found is not None and found.meta.get("demo") == made:
                refs.append(SegmentRef(found.id, found.version, found.site, found.name))
                continue
            _, streams, meta = demo_episode(config, episode)
            (ref,) = client.segments.store_many([(site, name, streams, meta)])
            refs.append(ref)
            new.append(ref)
    return refs
