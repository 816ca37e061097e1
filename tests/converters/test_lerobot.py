"""LeRobot v2.1 and v3.0, on the real datasets in ../shared/data/real."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import rayform
from rayform.converters.lerobot import LeRobotDataset, feature_names
from rayform.errors import InvalidInput

V30 = "lerobot_v30_so101_ros2_example"
V21 = "lerobot_v21_unitree_g1_subset"


def test_v30_every_episode_with_exact_counts_and_timestamps(real_data):
    import pyarrow.parquet as pq

    ds = LeRobotDataset(real_data / V30)
    episodes = ds.select()
    assert [e.index for e in episodes] == list(range(6)) and sum(e.length for e in episodes) == 1782
    rows = pq.read_table(real_data / V30 / "data/chunk-000/file-000.parquet").to_pydict()
    name, streams, meta = ds.read_episode(episodes[1])
    by = {s.name: s for s in streams}
    n = episodes[1].length
    assert set(by) == {"observation/state", "action/value", "wrist/rgb"}
    assert len(by["wrist/rgb"].timestamps) == n and len(by["observation/state"].values) == n
    start = episodes[0].length
    np.testing.assert_array_equal(by["action/value"].values, np.asarray(rows["action"][start : start + n], np.float32))
    recorded = np.asarray(rows["timestamp"][start : start + n], np.float64)
    ts = by["observation/state"].timestamps
    assert ts.dtype == np.int64 and ts[0] == 0 and ts[-1] == round((n - 1) * 1e9 / 30)
    assert np.max(np.abs(ts / 1e9 - recorded)) < 1e-6  # no drift against the recorded clock
    assert by["observation/state"].names == ["j0", "j1", "j2", "j3", "j4", "j5"]
    assert meta["tasks"] == ["pick and place"] and meta["robot_type"] == "so101_follower"
    video = by["wrist/rgb"]  # kept as recorded: AV1 packets, a keyframe first, one frame each
    assert isinstance(video, rayform.VideoStream) and video.codec == "av1" and (video.width, video.height) == (640, 360)
    assert video.keyframes[0] and len(video.packets) >= n and np.array_equal(video.timestamps, ts)
    _, decoded, _ = ds.read_episode(episodes[1], decode_video=True)
    assert {s.name: s for s in decoded}["wrist/rgb"].frames[0][:3] == b"\xff\xd8\xff"  # --decode-video: JPEG


def test_v21_subset_is_an_error_by_default_and_converts_what_is_there(real_data):
    ds = LeRobotDataset(real_data / V21)
    with pytest.raises(InvalidInput, match="98 episode.*absent.*--allow-missing"):
        ds.select()
    episodes = ds.select(allow_missing=True)
    assert [(e.index, e.length) for e in episodes] == [(1, 393), (2, 343)]
    _, streams, meta = ds.read_episode(episodes[1])
    by = {s.name: s for s in streams}
    assert len(by["cam_high/rgb"].timestamps) == 343 and by["observation/state"].values.shape == (343, 26)
    assert by["observation/state"].names[0] == "kLeftShoulderPitch" and len(by["observation/state"].names) == 26
    assert meta["tasks"] == ["Pick up the yellow bottle on the table."]


def test_names_in_every_shape_lerobot_writes():
    assert feature_names({"shape": [2], "names": ["a", "b"]}) == ["a", "b"]
    assert feature_names({"shape": [2], "names": [["a", "b"]]}) == ["a", "b"]
    assert feature_names({"shape": [2], "names": {"motors": ["a", "b"]}}) == ["a", "b"]
    assert feature_names({"shape": [3], "names": ["a", "b"]}) is None


def test_a_declared_video_that_is_missing_is_one_clear_error(real_data, tmp_path):
    copy = tmp_path / V30
    shutil.copytree(real_data / V30, copy)
    (copy / "videos/observation.images.wrist/chunk-000/file-000.mp4").unlink()
    with pytest.raises(InvalidInput, match="6 episode.*absent.*videos/observation.images.wrist"):
        LeRobotDataset(copy).select()


def test_a_truncated_video_fails_cleanly_and_leaves_the_store_as_it_was(real_data, tmp_path, client):
    copy = tmp_path / V30
    shutil.copytree(real_data / V30, copy)
    before = client.ingest("lerobot", [real_data / V21], "g1", options={"allow_missing": True}, progress=False)
    video = copy / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    with pytest.raises(InvalidInput, match="file-000.mp4"):
        client.ingest("lerobot", [copy], "so101", progress=False)
    assert client.segments.list() == sorted(before.segments, key=lambda r: (r.site, r.name))


def test_converted_lerobot_packs_and_loads(real_data, client):
    report = client.ingest("lerobot", [real_data / V30], "so101", slice_name="so101", progress=False)
    assert len(report.segments) == 6
    ds = rayform.torch.EpisodeDataset(report.slice, obs=["wrist/rgb", "observation/state"], action="action/value",
                                      fps=30, horizon=8)
    x = ds[10]
    assert x["wrist/rgb"].shape == (3, 360, 640) and x["action"].shape == (8, 6)
    assert len(ds) == sum(e.length for e in LeRobotDataset(real_data / V30).select())


def test_the_task_and_indices_of_a_real_recording_reach_every_sample(real_data, client):
    """The SO-101 recording's task ("pick and place", from meta/tasks.parquet) is in every
    sample's meta, with its episode's position in the slice and its step on the grid, through
    both datasets."""
    report = client.ingest("lerobot", [real_data / V30], "so101", slice_name="so101-tasks", progress=False,
                    options={"mapping": {"observation.images.wrist": None}})
    kw = dict(obs=["observation/state"], action="action/value", fps=15, horizon=4)
    ds = rayform.torch.EpisodeDataset(report.slice, **kw)
    metas = [ds[i]["meta"] for i in range(len(ds))]
    assert {m["task"] for m in metas} == {"pick and place"}
    lengths = [e.length for e in LeRobotDataset(real_data / V30).select()]
    for episode, length in enumerate(lengths):
        frames = sorted(m["frame_index"] for m in metas if m["episode_index"] == episode)
        assert frames == list(range(-(-length // 2)))  # every grid step of the episode, once
        assert {m["segment"] for m in metas if m["episode_index"] == episode} == {report.slice.segments[episode].id}
    streamed = rayform.torch.StreamingEpisodeDataset(report.slice, **kw, batch_size=16)
    seen = {(seg, int(e), int(f), task) for b in streamed for seg, e, f, task in
            zip(b["meta"]["segment"], b["meta"]["episode_index"], b["meta"]["frame_index"], b["meta"]["task"])}
    assert seen == {(m["segment"], m["episode_index"], m["frame_index"], m["task"]) for m in metas}


def test_a_task_given_at_ingest_is_every_episode_s(real_data, client):
    report = client.ingest("lerobot", [real_data / V30], "so101b", slice_name="so101-named", progress=False,
                    options={"mapping": {"observation.images.wrist": None}, "task": "stack the cubes"})
    x = rayform.torch.EpisodeDataset(report.slice, obs=["observation/state"], fps=15)[0]
    assert x["meta"]["task"] == "stack the cubes"


def test_an_episode_whose_state_is_all_nan_is_refused_and_the_store_is_left_byte_identical(real_data, tmp_path):
    """The last of six episodes holds NaN for its whole state: one error naming the stream and
    the row, nothing of the five converted before it left in the store; allowed, it is ingested."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    copy = tmp_path / V30
    shutil.copytree(real_data / V30, copy)
    data = copy / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data)
    last = np.asarray(table.column("episode_index").to_numpy()) == 5
    state = [([float("nan")] * 6 if bad else row) for bad, row in zip(last, table.column("observation.state").to_pylist())]
    column = table.schema.get_field_index("observation.state")
    pq.write_table(table.set_column(column, table.schema.field(column), pa.array(state, table.schema.field(column).type)),
                   data)
    client = rayform.Client(tmp_path / "store")
    client.slices.create(client.ingest("lerobot", [real_data / V21], "g1", options={"allow_missing": True},
                                progress=False).segments, name="before")
    before = {str(p.relative_to(tmp_path / "store")): p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()}
    with pytest.raises(InvalidInput, match=r"episode_000005.*stream observation/state: row 0 \(t = 0 ns\) is not finite"):
        client.ingest("lerobot", [copy], "so101", progress=False)
    after = {str(p.relative_to(tmp_path / "store")): p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()}
    assert after == before
    report = client.ingest("lerobot", [copy], "so101", options={"allow_nonfinite": True,
                                                                 "mapping": {"observation.images.wrist": None}},
                    slice_name="nan", progress=False)
    pack = client.pack(report.slice, 15, workers=1, progress=False)
    assert pack.stats["observation/state"].nonfinite > 0 and np.all(np.isfinite(pack.stats["observation/state"].mean))
