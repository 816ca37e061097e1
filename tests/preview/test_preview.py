"""rayform preview: the files are written and open, and what is drawn is what the pack holds."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import InvalidInput
from rayform.preview import PackedSamples, contact_sheet, plot_segment, preview

pytest.importorskip("matplotlib")
av = pytest.importorskip("av")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    c = rayform.Client(tmp_path_factory.mktemp("preview") / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=3, seconds=2.0, image_size=48)), name="p")
    return c, s, c.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16)


def test_the_packed_samples_of_every_segment_are_the_pack(packed):
    c, s, pack = packed
    per = [PackedSamples.of(c.store, pack, seg.id) for seg in s.segments]
    assert sum(len(p.t_ns) for p in per) == pack.samples
    for p in per:
        assert np.all(np.diff(p.t_ns) > 0)
        chunks = p.chunks["joints/position"]
        # the step k of a sample is the step k-1 of the next one: the same instant on the grid (up to
        # the nanosecond rounding of the grid, which interpolation turns into an ulp or so)
        real = ~p.is_pad[:-1, 1:] & ~p.is_pad[1:, :-1]
        assert real.any()
        np.testing.assert_allclose(chunks[:-1, 1:][real], chunks[1:, :-1][real], rtol=1e-5, atol=1e-6)


def test_the_plot_draws_each_stream_and_the_pack_s_chunks(packed):
    c, s, pack = packed
    seg = s.segment(0)
    fig = plot_segment(seg, pack)
    samples = PackedSamples.of(c.store, pack, seg.id)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert [t.split(" ")[0] for t in titles] == ["ee/pose", "joints/position"]
    ax = fig.axes[1]
    recorded = [line for line in ax.lines if line.get_marker() in ("None", None, "")]
    assert len(recorded) == seg.streams["joints/position"].shape[0]
    np.testing.assert_array_equal(recorded[0].get_ydata(), seg.values("joints/position")[:, 0])
    dots = np.concatenate([line.get_ydata() for line in ax.lines if line.get_marker() == "o" and
                           line.get_color() == recorded[0].get_color()])
    assert set(dots) <= set(samples.chunks["joints/position"][:, :, 0].ravel()) and len(dots) > samples.horizon
    assert not any(line.get_marker() == "o" for line in plot_segment(seg).axes[1].lines)  # no pack: no chunks


def test_preview_writes_files_that_open(packed, tmp_path):
    from rerun.chunk import RrdReader

    c, s, pack = packed
    files = preview(s, tmp_path / "out", segments=2, rerun=tmp_path / "all.rrd")
    names = sorted(str(f.relative_to(tmp_path)) for f in files)
    assert names == sorted([f"out/{seg.id}/{f}" for seg in s.segments[:2]
                            for f in ("sheet.png", "plot.png", "cam0_rgb.mp4", "wrist_rgb.mp4")] + ["all.rrd"])
    seg = s.segment(0)
    sheet = Image.open(tmp_path / "out" / seg.id / "sheet.png")
    sheet.load()
    assert sheet.size == contact_sheet(seg).size and sheet.size[0] > 4 * 2 * 48
    Image.open(tmp_path / "out" / seg.id / "plot.png").load()
    with av.open(str(tmp_path / "out" / seg.id / "cam0_rgb.mp4")) as f:
        frames = [fr.to_ndarray(format="rgb24") for fr in f.decode(video=0)]
    assert len(frames) == seg.streams["cam0/rgb"].count and frames[0].shape == (48, 48, 3)
    first = seg.frame_array("cam0/rgb", 0).astype(int)
    assert np.abs(frames[0].astype(int) - first).mean() < 12  # the same picture, through a lossy codec
    rows: dict[str, int] = {}
    for chunk in RrdReader(tmp_path / "all.rrd").stream().to_chunks():
        if not chunk.is_static:
            rows[str(chunk.entity_path)] = rows.get(str(chunk.entity_path), 0) + chunk.num_rows
    for sid in (x.id for x in s.segments[:2]):
        one = c.segments.get(sid)
        for name, info in one.streams.items():
            assert rows[f"/{sid}/{name}"] == info.count
        assert rows[f"/{sid}/ee/pose/position"] == one.streams["ee/pose"].count
        assert rows[f"/{sid}/pack_15fps/samples"] == len(PackedSamples.of(c.store, pack, sid).t_ns)


def test_a_missing_extra_fails_before_anything_is_written(packed, tmp_path, monkeypatch):
    import importlib.util

    c, s, _ = packed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rerun" else real(name, *a))
    with pytest.raises(InvalidInput, match=r"pip install 'rayform\[rerun\]'"):
        preview(s, tmp_path / "out", rerun=tmp_path / "x.rrd")
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidInput, match="no segment 'seg_000000000000'"):
        preview(s, tmp_path / "out", segments=["seg_000000000000"])


def test_preview_of_a_converted_real_recording_from_the_command_line(real_data, tmp_path):
    from rerun.chunk import RrdReader

    env = {"RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache")}

    def cli(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", *args], capture_output=True, text=True,
                           env={**__import__("os").environ, **env}, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stdout

    slice_id = cli("ingest", "lerobot", str(real_data / "lerobot_v30_so101_ros2_example"), "--site", "so101",
                   "--slice", "so101").split()[-1]
    cli("pack", slice_id, "--fps", "15", "--history", "0")
    out = cli("preview", slice_id, "--out", str(tmp_path / "look"), "--segments", "1", "--rerun",
              str(tmp_path / "so101.rrd")).split()
    pngs = [p for p in out if p.endswith(".png")]
    mp4s = [p for p in out if p.endswith(".mp4")]
    assert len(pngs) == 2 and mp4s and out[-1].endswith("so101.rrd")
    for p in pngs:
        Image.open(p).load()
    with av.open(mp4s[0]) as f:
        assert sum(1 for _ in f.decode(video=0)) > 10
    assert sum(c.num_rows for c in RrdReader(tmp_path / "so101.rrd").stream().to_chunks()) > 100


def test_preview_without_fps_over_two_packs_says_it_draws_no_chunks(tmp_path, caplog):
    c = rayform.Client(tmp_path / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=1, seconds=1.0, image_size=16)), name="two")
    for fps in (5, 15):
        c.pack(s, fps, workers=1, progress=False)
    with caplog.at_level("WARNING", logger="rayform"):
        preview(s, tmp_path / "out", segments=1, video=False)
    assert f"{s.id} has packs at 5, 15 fps: no action chunks drawn" in caplog.text
