"""Actions: several streams concatenated, poses as the rotation asked, pose deltas as
relative transforms (checked against scipy's rotations)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import rayform
from rayform.errors import InvalidInput
from rayform.frames import represent
from rayform.sample.spec import SampleSpec

H = 8


@pytest.fixture(scope="module")
def demo(shared_demo):
    client, s = shared_demo
    client.pack(s, 15, workers=1, progress=False)
    return s


def _sample(s, action, rotation=None, index=5):
    ds = rayform.torch.EpisodeDataset(s, obs=["joints/position"], action=action, fps=15, horizon=H, rotation=rotation)
    return ds, ds[index]


def test_a_composite_action_is_its_parts_side_by_side_with_their_names(demo):
    _, delta = _sample(demo, "joints/position_delta")
    _, pose = _sample(demo, "ee/pose")
    ds, both = _sample(demo, ["joints/position_delta", "ee/pose"], rotation="rot6d")
    assert both["action"].shape == (H, 8 + 3 + 6)
    assert np.allclose(both["action"][:, :8], delta["action"])
    assert np.allclose(both["action"][:, 8:11], pose["action"][:, :3])
    assert np.allclose(both["action"][:, 11:], represent(pose["action"][:, 3:].numpy().astype(np.float64), "rot6d"),
                       atol=1e-6)
    names = ds.action_names
    assert len(names) == 17 and names[0].startswith("joints/position_delta[") and names[8:11] == \
        ["ee/pose[x]", "ee/pose[y]", "ee/pose[z]"] and names[-1] == "ee/pose[r32]"
    assert both["action_is_pad"].tolist() == (delta["action_is_pad"] | pose["action_is_pad"]).tolist()


@pytest.mark.parametrize("rotation", ["quat", "axis_angle", "rot6d"])
def test_a_pose_delta_is_the_relative_transform(demo, rotation):
    _, absolute = _sample(demo, "ee/pose", index=9)
    _, rel = _sample(demo, "ee/pose_delta", rotation=rotation, index=9)
    future = absolute["action"].numpy().astype(np.float64)
    # the same index, seed and pack: the same sample, whose current pose is in obs
    now = rayform.torch.EpisodeDataset(demo, obs=["ee/pose"], action="ee/pose", fps=15, horizon=H)[9]["ee/pose"]
    r0 = Rotation.from_quat(now.numpy()[3:].astype(np.float64))
    want_xyz = r0.inv().apply(future[:, :3] - now.numpy()[:3])
    want_rot = r0.inv() * Rotation.from_quat(future[:, 3:])
    got = rel["action"].numpy().astype(np.float64)
    assert np.allclose(got[:, :3], want_xyz, atol=1e-5)
    if rotation == "quat":
        want = want_rot.as_quat()
        want = np.where(want[:, 3:] < 0, -want, want)
        assert np.allclose(got[:, 3:], want, atol=1e-5)
    elif rotation == "axis_angle":
        assert np.allclose(got[:, 3:], want_rot.as_rotvec(), atol=1e-5)
    else:
        m = want_rot.as_matrix()
        assert np.allclose(got[:, 3:], np.concatenate([m[:, :, 0], m[:, :, 1]], axis=1), atol=1e-5)


def test_rotation_representations_of_a_known_rotation():
    q = np.array([0, 0, np.sin(np.pi / 4), np.cos(np.pi / 4)])  # 90° about z
    assert np.allclose(represent(q, "axis_angle"), [0, 0, np.pi / 2])
    assert np.allclose(represent(q, "rot6d"), [0, 1, 0, -1, 0, 0])
    assert np.allclose(represent(-q, "quat"), q)  # w ≥ 0: one rotation, one quaternion
    assert np.allclose(represent(np.array([0, 0, 0, 1.0]), "axis_angle"), 0)


def test_bad_actions_are_one_error():
    with pytest.raises(InvalidInput, match="rotation 'euler'"):
        SampleSpec.of(["joints/position"], "ee/pose", rotation="euler")
    with pytest.raises(InvalidInput, match="several to concatenate"):
        SampleSpec.of(["joints/position"], ["joints/position", ""])
