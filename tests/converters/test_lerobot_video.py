"""LeRobot's videos kept as recorded, on the real v3.0 and v2.1 examples: the bytes stay the
source's, every frame decodes as PyAV decodes the source at its timestamp, and a keep-pack
holds them bit for bit."""

from __future__ import annotations

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

import rayform
from rayform.converters.lerobot import LeRobotDataset

V30 = "lerobot_v30_so101_ros2_example"
V21 = "lerobot_v21_unitree_g1_subset"


def source_frames(path) -> dict[int, np.ndarray]:
    """Every frame of a video file by its time in ns, as PyAV decodes it."""
    out = {}
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            out[round(frame.pts * stream.time_base * 1_000_000_000)] = frame.to_ndarray(format="rgb24")
    return out


def test_v30_keeps_its_video_and_every_frame_decodes_as_the_source(real_data, client):
    root = real_data / V30
    source = next(root.glob("videos/**/*.mp4"))
    report = client.ingest("lerobot", [root], "so101", progress=False)
    segments = [client.segments.get(r.id, r.version) for r in report.segments]
    stored = sum(int(seg.frame_sizes("wrist/rgb").sum()) for seg in segments)
    # the packets as recorded (a keyframe lead-in at most per episode), the index and stamps beside
    overhead = sum(seg.streams["wrist/rgb"].count * 8 * 4 for seg in segments)
    assert abs(stored + overhead - source.stat().st_size) < 0.05 * source.stat().st_size
    episodes = pq.read_table(next((root / "meta" / "episodes").rglob("*.parquet"))).to_pylist()
    frames = source_frames(source)
    for seg, e in zip(segments, episodes):
        offset = round(e["videos/observation.images.wrist/from_timestamp"] * 1e9)
        ts = seg.timestamps("wrist/rgb")
        assert len(ts) == e["length"] and ts[0] == 0
        for i in range(len(ts)):
            t = min(frames, key=lambda s: abs(s - offset - ts[i]))  # the source frame at this time
            assert abs(t - offset - ts[i]) < 1_000_000
            assert np.array_equal(seg.frame_array("wrist/rgb", i), frames[t]), (seg.id, i)


def test_v21_per_episode_files_keep_their_bytes_and_frames(real_data, client):
    root = real_data / V21
    report = client.ingest("lerobot", [root], "g1", options={"allow_missing": True}, progress=False)
    ds = LeRobotDataset(root)
    for ref, episode in zip(report.segments, ds.select(allow_missing=True)):
        seg = client.segments.get(ref.id, ref.version)
        path = episode.videos["observation.images.cam_high"][0]
        assert abs(int(seg.frame_sizes("cam_high/rgb").sum()) - path.stat().st_size) < 0.05 * path.stat().st_size
        frames = source_frames(path)
        ts = seg.timestamps("cam_high/rgb")
        for i in range(0, len(ts), 5):
            assert np.array_equal(seg.frame_array("cam_high/rgb", i), frames[int(ts[i])])


def test_a_keep_pack_of_a_recording_keyed_every_other_frame_encodes_where_that_is_smaller(real_data, client):
    """The example's AV1 has a keyframe every other frame: each clip of 8 copying its packets
    from the keyframe before it would take more bytes than the same clips encoded, so the pack
    encodes them and says why; it is then smaller than its source."""
    root = real_data / V30
    report = client.ingest("lerobot", [root], "so101", slice_name="so101", progress=False)
    pack = client.pack(report.slice, 30, workers=1, progress=False)
    video = pack.schema["wrist/rgb"].video
    assert video is not None and not video.kept and video.codec == "h264" and "keeping its packets copies" in video.why
    source = next(root.glob("videos/**/*.mp4"))
    assert sum(sh.bytes for sh in pack.shards) < source.stat().st_size
    frames = list(source_frames(source).values())
    first = [e["dataset_from_index"] for e in pq.read_table(next((root / "meta" / "episodes").rglob("*.parquet")))
             .to_pylist()]
    ds = rayform.torch.EpisodeDataset(report.slice, obs=["wrist/rgb"], fps=30)
    from rayform.codec.video import psnr

    x = ds[5]
    want = frames[first[x["meta"]["episode_index"]] + x["meta"]["frame_index"]]
    assert psnr(x["wrist/rgb"].numpy().transpose(1, 2, 0), want) > 35  # the source frame, encoded once more


def test_a_pack_whose_grid_skips_frames_encodes_and_says_why(real_data, client):
    report = client.ingest("lerobot", [real_data / V30], "so101", slice_name="so101", progress=False)
    pack = client.pack(report.slice, 15, resize=(120, 160), workers=1, progress=False)
    video = pack.schema["wrist/rgb"].video
    assert not video.kept and video.codec == "h264" and "resized to 160x120" in video.why
    x = rayform.torch.EpisodeDataset(report.slice, obs=["wrist/rgb"], fps=15, resize=(120, 160))[3]
    assert x["wrist/rgb"].shape == (3, 120, 160)


def test_a_truncated_video_is_one_clear_error_and_stores_nothing(real_data, tmp_path, client):
    import shutil

    copy = tmp_path / V21
    shutil.copytree(real_data / V21, copy)
    path = next(copy.glob("videos/**/episode_000002.mp4"))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    with pytest.raises(rayform.InvalidInput, match="episode_000002.mp4"):
        client.ingest("lerobot", [copy], "g1", options={"allow_missing": True}, progress=False)
    assert client.segments.list() == []


def test_a_corrupt_packet_is_kept_as_recorded_and_its_frame_says_so_when_decoded(real_data, tmp_path, client):
    """Ingest copies packets without decoding them (it is I/O): a packet of zeroes in the middle
    of a recording is found where it is decoded, as one Malformed naming the segment, stream
    and frame, and the frames after the next keyframe decode again."""
    import shutil

    copy = tmp_path / V21
    shutil.copytree(real_data / V21, copy)
    path = next(copy.glob("videos/**/episode_000002.mp4"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2: len(data) // 2 + 4096] = bytes(4096)
    path.write_bytes(bytes(data))
    report = client.ingest("lerobot", [copy], "g1", options={"allow_missing": True}, progress=False)
    seg = client.segments.get(report.segments[-1].id)
    bad = []
    for i in range(seg.streams["cam_high/rgb"].count):
        try:
            seg.frame_array("cam_high/rgb", i)
        except rayform.Malformed as e:
            assert f"{seg.id}" in str(e) and "cam_high/rgb" in str(e) and f"frame {i}" in str(e)
            bad.append(i)
    assert 1 <= len(bad) <= 4  # the damaged packet's frames, up to the next keyframe


def test_a_video_whose_stream_list_is_zeroed_is_one_clear_error_decoded_or_kept(real_data, tmp_path, client):
    """The box that lists an MP4's streams zeroed (``moov``): one error naming the file, whether
    the video is kept or decoded (``--decode-video`` said ``IndexError: tuple index out of range``)."""
    import shutil

    copy = tmp_path / V21
    shutil.copytree(real_data / V21, copy)
    path = next(copy.glob("videos/**/episode_000002.mp4"))
    data = bytearray(path.read_bytes())
    at = data.index(b"moov") - 4
    size = int.from_bytes(data[at:at + 4], "big")
    data[at + 8:at + size] = bytes(size - 8)
    path.write_bytes(bytes(data))
    for decode in (False, True):
        with pytest.raises(rayform.InvalidInput, match="episode_000002.mp4") as info:
            client.ingest("lerobot", [copy], "g1", options={"allow_missing": True, "decode_video": decode},
                   progress=False)
        assert "IndexError" not in str(info.value)
    assert client.segments.list() == []
