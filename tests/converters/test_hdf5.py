"""ALOHA/ACT and robomimic HDF5, written here with h5py in their documented layouts."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

import rayform
from rayform.codec import imagecodec
from rayform.converters.hdf5 import iter_hdf5
from rayform.errors import InvalidInput

N = 12


def _aloha(path, compressed: bool):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (N, 24, 32, 3), dtype=np.uint8)
    qpos = rng.normal(size=(N, 14)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.attrs["sim"] = False
        obs = f.create_group("observations")
        if compressed:
            jpegs = [imagecodec.encode_jpeg(im, 90) for im in images]
            pad = max(map(len, jpegs))
            buf = np.zeros((N, pad), np.uint8)
            for i, j in enumerate(jpegs):
                buf[i, : len(j)] = np.frombuffer(j, np.uint8)
            obs.create_dataset("images/cam_high", data=buf)
            f.create_dataset("compress_len", data=np.array([[len(j) for j in jpegs]]))
        else:
            obs.create_dataset("images/cam_high", data=images)
        obs.create_dataset("qpos", data=qpos)
        obs.create_dataset("qvel", data=qpos * 2)
        obs.create_dataset("effort", data=qpos * 3)
        f.create_dataset("action", data=qpos + 1)
    return images, qpos, (jpegs if compressed else None)


@pytest.mark.parametrize("compressed", [False, True])
def test_aloha_values_exactly(tmp_path, compressed):
    images, qpos, jpegs = _aloha(tmp_path / "episode_0.hdf5", compressed)
    [(name, streams, meta)] = list(iter_hdf5(tmp_path / "episode_0.hdf5", fps=50))
    by = {s.name: s for s in streams}
    assert name == "episode_0" and set(by) == {"cam_high/rgb", "joints/position", "joints/velocity",
                                               "joints/effort", "action/value"}
    np.testing.assert_array_equal(by["joints/position"].values, qpos)
    np.testing.assert_array_equal(by["action/value"].values, qpos + 1)
    assert by["joints/position"].timestamps.tolist() == [i * 20_000_000 for i in range(N)]
    if compressed:
        assert by["cam_high/rgb"].frames == jpegs  # JPEG bytes kept as recorded
    else:
        np.testing.assert_array_equal(by["cam_high/rgb"].frames, images)


def test_aloha_without_an_fps_asks_for_one(tmp_path):
    _aloha(tmp_path / "e.hdf5", False)
    with pytest.raises(InvalidInput, match="no fps attribute; pass --fps"):
        list(iter_hdf5(tmp_path / "e.hdf5"))


def test_robomimic_demos_become_segments(tmp_path, client):
    rng = np.random.default_rng(1)
    path = tmp_path / "lift.hdf5"
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = '{"env_name": "Lift", "env_kwargs": {"control_freq": 20}}'
        for d, n in (("demo_0", 9), ("demo_1", 7)):
            g = data.create_group(d)
            g.create_dataset("obs/agentview_image", data=rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8))
            g.create_dataset("obs/robot0_eef_pos", data=rng.normal(size=(n, 3)))
            g.create_dataset("actions", data=rng.normal(size=(n, 7)))
    report = client.ingest("hdf5", [path], "sim", progress=False)
    assert [r.name for r in report.segments] == ["lift_demo_0", "lift_demo_1"]
    seg = client.segments.get(report.segments[1].id)
    assert set(seg.streams) == {"agentview/rgb", "obs/robot0_eef_pos", "action/value"}
    assert seg.streams["action/value"].count == 7
    with h5py.File(path) as f:
        np.testing.assert_array_equal(seg.values("action/value"), f["data/demo_1/actions"][()])
    assert int(seg.timestamps("action/value")[1]) == 50_000_000  # 20 Hz from env_args


def test_a_truncated_hdf5_fails_cleanly_and_stores_nothing(tmp_path, client):
    _aloha(tmp_path / "good.hdf5", False)
    data = (tmp_path / "good.hdf5").read_bytes()
    (tmp_path / "cut.hdf5").write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidInput, match="cut.hdf5"):
        client.ingest("hdf5", [tmp_path / "cut.hdf5"], "lab", options={"fps": 50}, progress=False)
    assert client.segments.list() == []


def test_converted_aloha_packs_and_loads(tmp_path, client):
    import rayform

    _, qpos, _ = _aloha(tmp_path / "ep.hdf5", True)
    with pytest.raises(InvalidInput, match=r"no stream 'cam_hihg/rgb' to map. It has: .*cam_high/rgb"):
        client.ingest("hdf5", [tmp_path / "ep.hdf5"], "aloha", options={"fps": 50, "mapping": {"cam_hihg/rgb": "x"}},
                      progress=False)
    report = client.ingest("hdf5", [tmp_path / "ep.hdf5"], "aloha", options={"fps": 50}, slice_name="aloha",
                           progress=False)
    ds = rayform.torch.EpisodeDataset(report.slice, obs=["cam_high/rgb", "joints/position"], action="action/value",
                                      fps=25, horizon=2)
    xs = [ds[i] for i in range(len(ds))]
    first = min(xs, key=lambda s: int(s["t_ns"]))
    assert first["cam_high/rgb"].shape == (3, 24, 32)
    np.testing.assert_allclose(first["joints/position"].numpy(), qpos[0])
    np.testing.assert_allclose(first["action"].numpy(), qpos[[2, 4]] + 1, atol=1e-6)  # 25 fps = every 2nd 50 Hz frame


def test_a_source_whose_last_episode_fails_stores_no_segment(tmp_path, client):
    """robomimic with demo_0 good and demo_1 broken: all or nothing, so no segment at all."""
    path = tmp_path / "two.hdf5"
    with h5py.File(path, "w") as f:
        for i, n in enumerate((10, 10)):
            g = f.create_group(f"data/demo_{i}")
            g["actions"] = np.zeros((n, 3), np.float32)
            g["obs/eef_quat"] = np.tile([0, 0, 0, 1.0], (n if i == 0 else n - 1, 1))  # demo_1: one value short
        f["data"].attrs["env_args"] = json.dumps({"env_kwargs": {"control_freq": 20}})
    with pytest.raises(rayform.InvalidInput, match="two.hdf5"):
        client.ingest("hdf5", [path], "lab", progress=False)
    assert client.segments.list() == []


@pytest.mark.parametrize("how", ["external", "virtual", "external link"])
def test_data_kept_in_another_file_is_never_read(tmp_path, client, how):
    """External storage, virtual datasets and external links would copy a host file into the store."""
    secret = tmp_path / "host-file.bin"
    secret.write_bytes(np.arange(40, dtype=np.float32).tobytes())
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as f:
        f["action"] = np.arange(40, dtype=np.float32).reshape(10, 4)
    path = tmp_path / "episode.hdf5"
    with h5py.File(path, "w") as f:
        f.attrs["fps"] = 10
        f["observations/qpos"] = np.zeros((10, 4), np.float32)
        if how == "external":
            f.create_dataset("action", shape=(10, 4), dtype=np.float32, external=[(str(secret), 0, 160)])
        elif how == "virtual":
            layout = h5py.VirtualLayout(shape=(10, 4), dtype=np.float32)
            layout[:] = h5py.VirtualSource(str(other), "action", shape=(10, 4))
            f.create_virtual_dataset("action", layout)
        else:
            f["action"] = h5py.ExternalLink(str(other), "action")
    with pytest.raises(rayform.InvalidInput, match="another file|other files"):
        client.ingest("hdf5", [path], "lab", progress=False)
    assert client.segments.list() == []


def test_a_dataset_claiming_more_than_the_limit_is_refused_before_it_is_read(tmp_path, client):
    path = tmp_path / "huge.hdf5"
    with h5py.File(path, "w") as f:
        f.attrs["fps"] = 10
        f.create_dataset("action", shape=(1 << 20, 1 << 15), dtype=np.float32, chunks=(16, 16))  # 128 GiB, unwritten
        f["observations/qpos"] = np.zeros((4, 2), np.float32)
    with pytest.raises(rayform.InvalidInput, match="GiB"):
        client.ingest("hdf5", [path], "lab", progress=False)
