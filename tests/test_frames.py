"""Frame conventions: the exact change of basis, on known vectors and round trips."""

from __future__ import annotations

import numpy as np
import pytest

from rayform import frames
from rayform.errors import InvalidInput


def _pose(p, q=(0, 0, 0, 1)):
    return np.array([*p, *q], np.float64)


@pytest.mark.parametrize(
    "dst, forward, left, up",
    [
        ("ros", (1, 0, 0), (0, 1, 0), (0, 0, 1)),
        ("optical", (0, 0, 1), (-1, 0, 0), (0, -1, 0)),  # x right, y down, z forward
        ("opengl", (0, 0, -1), (-1, 0, 0), (0, 1, 0)),  # x right, y up, z back
    ],
)
def test_known_vectors(dst, forward, left, up):
    for ros, expected in (((1, 0, 0), forward), ((0, 1, 0), left), ((0, 0, 1), up)):
        out = frames.convert_poses(_pose(ros), "ros", dst)
        np.testing.assert_allclose(out[:3], expected, atol=1e-12)


def test_rotations_are_conjugated_not_just_relabelled():
    # 90° yaw about ROS z (up) is 90° about -y in optical axes (y points down).
    q = (0, 0, np.sin(np.pi / 4), np.cos(np.pi / 4))
    out = frames.convert_poses(_pose((0, 0, 0), q), "ros", "optical")
    np.testing.assert_allclose(np.abs(out[3:]), [0, np.sin(np.pi / 4), 0, np.cos(np.pi / 4)], atol=1e-12)
    assert np.sign(out[4]) != np.sign(out[6])  # about -y
    # and the rotated forward vector agrees: ROS forward yawed left is ROS left
    r = frames.basis("ros", "optical")
    assert np.allclose(r @ [0, 1, 0], [-1, 0, 0])


@pytest.mark.parametrize("a", frames.FRAMES)
@pytest.mark.parametrize("b", frames.FRAMES)
def test_round_trips(a, b):
    rng = np.random.default_rng(0)
    q = rng.normal(size=(50, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    poses = np.hstack([rng.normal(size=(50, 3)), q])
    back = frames.convert_poses(frames.convert_poses(poses, a, b), b, a)
    np.testing.assert_allclose(back[:, :3], poses[:, :3], atol=1e-12)
    # q and -q are the same rotation
    assert np.allclose(np.abs(np.sum(back[:, 3:] * poses[:, 3:], axis=1)), 1.0)


def test_none_keeps_poses_as_recorded_and_unknown_frames_are_refused():
    p = _pose((1, 2, 3))
    assert frames.convert_poses(p, "optical", None) is p
    with pytest.raises(InvalidInput, match="frame 'ned'"):
        frames.convert_poses(p, "ros", "ned")
