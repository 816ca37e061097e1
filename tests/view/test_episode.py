"""The episode page's data: streams and frame times, plot series, frames as recorded, and a
recorded video remuxed to an MP4 that decodes to the very frames the store holds."""

from __future__ import annotations

import io

import numpy as np
import pytest

import rayform
from rayform.codec import imagecodec
from rayform.errors import InvalidInput, SegmentNotFound, StreamNotFound
from rayform.view import episode
from rayform.view.episode import Episodes
from rayform.view.segment_table import SegmentTable
from tests.conftest import recorded_video


def _page(client: rayform.Client) -> Episodes:
    return Episodes(client.segments, SegmentTable(client.segments.catalog).latest)


def _decoded_mp4(data: bytes) -> tuple[list[np.ndarray], list[float]]:
    import av

    with av.open(io.BytesIO(data)) as container:
        frames = [(f.to_ndarray(format="rgb24"), float(f.time)) for f in container.decode(video=0)]
    return [f for f, _ in frames], [t for _, t in frames]


def test_summary_and_series_are_the_stored_values(shared_demo):
    client, s = shared_demo
    seg = s.segment(0)
    page = _page(client)
    summary = page.summary(seg.id, seg.version)
    start = min(int(seg.timestamps(n)[0]) for n in seg.streams)
    assert summary["start_ns"] == start and summary["version"] == seg.version
    cams = {st["name"]: st for st in summary["streams"] if st["kind"] == "image"}
    assert set(cams) == {n for n, i in seg.streams.items() if i.is_image}
    for name, st in cams.items():
        np.testing.assert_allclose(st["times"], (seg.timestamps(name) - start) / 1e9, atol=1e-6)
        assert st["mp4"] is False  # recorded JPEGs: shown frame by frame
    series = page.series(seg.id, seg.version)
    assert set(series) == {n for n, i in seg.streams.items() if not i.is_image}
    values = seg.values("joints/position")
    assert np.allclose(np.array(series["joints/position"]["values"]).T, values, atol=1e-6)
    assert series["joints/position"]["labels"] == list(seg.stream("joints/position").names)


def test_a_long_stream_is_plotted_as_each_buckets_extremes_and_nonfinite_values_are_nulls(client, monkeypatch):
    t = np.arange(1000, dtype=np.int64) * 10_000_000
    v = np.arange(2000, dtype=np.float64).reshape(1000, 2)
    v[20:40, 1] = np.nan  # a bucket of nothing but NaN: a hole
    v[537, 0] = 1e6  # one sample of a thousand: drawn at its height
    v[538, 0] = -1e6
    ref = client.segments.add("lab", "long", [rayform.ArrayStream("x", t, v)], allow_nonfinite=True)
    monkeypatch.setattr(episode, "PLOT_POINTS", 100)
    s = _page(client).series(ref.id, ref.version)["x"]
    assert s["stride"] == 20 and len(s["t"]) == 100
    assert max(s["values"][0]) == 1e6 and min(s["values"][0]) == -1e6
    k = s["values"][0].index(1e6)
    assert s["values"][0][k + 1] == -1e6 and s["t"][k] == 5.2 and s["t"][k + 1] == 5.39  # in the order they occur
    assert s["values"][0][:2] == [v[0, 0], v[19, 0]] and s["values"][1][2:4] == [None, None]
    pose = np.tile([0, 0, 0, 0, 0, 0, 1.0], (5, 1))
    ref = client.segments.add("lab", "pose", [rayform.PoseStream("p", t[:5], pose)])
    assert _page(client).series(ref.id, ref.version)["p"]["labels"] == ["x", "y", "z", "qx", "qy", "qz", "qw"]


def test_a_zoomed_window_has_every_sample_in_it_and_one_each_side(client, monkeypatch):
    t = 5_000_000_000 + np.arange(100_000, dtype=np.int64) * 10_000_000  # 1,000 s at 100 Hz
    v = np.sin(np.arange(100_000) / 500.0)[:, None]
    v[60_000:60_005, 0] = 1e6
    ref = client.segments.add("lab", "long", [rayform.ArrayStream("x", t, v)])
    whole = _page(client).series(ref.id, ref.version)["x"]
    assert whole["stride"] > 1 and len(whole["t"]) <= episode.PLOT_POINTS
    s = _page(client).series(ref.id, ref.version, (599.5, 600.5))["x"]
    assert s["stride"] == 1 and len(s["t"]) == 103  # 101 samples from 599.5 to 600.5 s, and one each side
    assert s["t"][0] == pytest.approx(599.49) and s["t"][-1] == pytest.approx(600.51)
    assert s["values"][0][s["t"].index(600.0):s["t"].index(600.04) + 1] == [1e6] * 5
    monkeypatch.setattr(episode, "PLOT_POINTS", 50)  # a window of more samples than a plot takes: reduced alike
    s = _page(client).series(ref.id, ref.version, (590.0, 610.0))["x"]
    assert s["stride"] > 1 and max(s["values"][0]) == 1e6 and len(s["t"]) <= 50


def test_frames_are_the_recorded_bytes_or_encoded_from_raw(shared_demo, client):
    demo, s = shared_demo
    seg = s.segment(1)
    data, kind = _page(demo).frame(seg.id, seg.version, "cam0/rgb", 3)
    assert kind == "image/jpeg" and data == bytes(seg.frame_bytes("cam0/rgb", 3))
    t = np.arange(3, dtype=np.int64) * 33_000_000
    raw = np.stack([np.full((8, 8), 40 * k, np.uint16) + np.arange(8, dtype=np.uint16) for k in range(3)])
    ref = client.segments.add("lab", "depth", [rayform.ImageStream("depth", t, raw)])
    data, kind = _page(client).frame(ref.id, ref.version, "depth", 2)
    image = imagecodec.decode(data, "jpeg")
    assert kind == "image/jpeg" and image.shape[:2] == (8, 8)
    assert image[..., 0][0, 7] > image[..., 0][0, 0]  # scaled to its range: the ramp is seen
    with pytest.raises(InvalidInput):
        _page(client).frame(ref.id, ref.version, "depth", 3)


def test_a_recorded_h264_plays_as_recorded(client):
    stream, frames = recorded_video(frames=24, lead=2)
    ref = client.segments.add("lab", "video", [stream])
    page = _page(client)
    cam = page.summary(ref.id, ref.version)["streams"][0]
    assert cam["mp4"] and cam["mime"].startswith('video/mp4; codecs="avc1')
    data = page.mp4(ref.id, ref.version, "cam/rgb")
    decoded, times = _decoded_mp4(data)
    # every packet (the lead-in too), each at its own time from the first
    assert len(decoded) == 24 and np.allclose(np.diff(times), 1 / 30, atol=1e-4)
    for k, image in enumerate(frames):  # the stored frames, bit for bit: not one pixel re-encoded
        assert np.array_equal(decoded[k + 2], image)
        # and at the page's time of that frame: the MP4's time plus where the MP4 starts
        assert times[k + 2] + cam["mp4_start"] == pytest.approx(cam["times"][k], abs=2e-5)
    assert page.mp4(ref.id, ref.version, "cam/rgb") is data  # kept for the browser's range requests


def test_a_recorded_av1_from_lerobot_plays_as_recorded(real_data, client):
    client.ingest("lerobot", [real_data / "lerobot_v30_so101_ros2_example"], site="so101", progress=False)
    row = client.segments.list("so101")[0]
    seg = client.segments.get(row.id, row.version)
    name = next(n for n, i in seg.streams.items() if i.is_video)
    data = _page(client).mp4(seg.id, seg.version, name)
    decoded, times = _decoded_mp4(data)
    video = seg.video(name)
    assert len(decoded) == video.video.packets
    for i in (0, len(seg.timestamps(name)) // 2, len(seg.timestamps(name)) - 1):
        k = int(video.frame_packet[i])
        assert np.array_equal(decoded[k], seg.frame_array(name, i))
        assert times[k] == pytest.approx((int(seg.timestamps(name)[i]) - int(video.packet_times.min())) / 1e9,
                                         abs=2e-5)


def test_values_are_not_a_camera(shared_demo):
    client, s = shared_demo
    seg = s.segment(0)
    with pytest.raises(StreamNotFound):
        _page(client).frame(seg.id, seg.version, "joints/position", 0)
    with pytest.raises(InvalidInput):
        _page(client).mp4(seg.id, seg.version, "cam0/rgb")  # JPEGs: frames, not a video


def test_an_older_version_says_so_and_no_version_is_the_latest(client):
    t = np.arange(5, dtype=np.int64) * 100_000_000
    old = client.segments.add("lab", "ep", [rayform.ArrayStream("x", t, np.zeros((5, 1), np.float32))])
    new = client.segments.add("lab", "ep", [rayform.ArrayStream("x", t, np.ones((5, 1), np.float32))])
    assert old.id == new.id and old.version != new.version
    page = _page(client)
    assert page.summary(old.id, old.version)["latest"] == new.version
    assert page.summary(old.id, None)["version"] == new.version
    with pytest.raises(SegmentNotFound):
        page.summary("seg_000000000000", None)


def test_a_recording_too_long_to_remux_whole_is_shown_frame_by_frame(client, monkeypatch):
    stream, _ = recorded_video(frames=12)
    ref = client.segments.add("lab", "video", [stream])
    monkeypatch.setattr(episode, "MP4_MAX_BYTES", 100)
    page = _page(client)
    assert page.summary(ref.id, ref.version)["streams"][0]["mp4"] is False
    with pytest.raises(InvalidInput):
        page.mp4(ref.id, ref.version, "cam/rgb")
    assert page.frame(ref.id, ref.version, "cam/rgb", 11)[1] == "image/jpeg"
