"""The synthetic demo source: realistic, deterministic, at native rates."""

from __future__ import annotations

import numpy as np

from rayform.converters.demo import DemoConfig, demo_episode


def test_demo_is_deterministic_by_seed():
    a = demo_episode(DemoConfig(seconds=1.0, seed=3), 1)
    b = demo_episode(DemoConfig(seconds=1.0, seed=3), 1)
    c = demo_episode(DemoConfig(seconds=1.0, seed=4), 1)
    assert a[1][0].frames == b[1][0].frames
    np.testing.assert_array_equal(a[1][2].values, b[1][2].values)
    assert a[1][0].frames != c[1][0].frames


def test_demo_streams_rates_sizes_and_frames():
    name, streams, meta = demo_episode(DemoConfig(seconds=4.0), 0)
    by = {s.name: s for s in streams}
    assert set(by) == {"cam0/rgb", "wrist/rgb", "joints/position", "ee/pose"}
    cam_hz = 1e9 / np.median(np.diff(by["cam0/rgb"].timestamps))
    joint_hz = 1e9 / np.median(np.diff(by["joints/position"].timestamps))
    assert 29 < cam_hz < 31 and 99 < joint_hz < 101
    assert np.std(np.diff(by["joints/position"].timestamps)) > 0  # jittered, as real clocks are
    sizes = [len(f) for f in by["cam0/rgb"].frames + by["wrist/rgb"].frames]
    assert min(sizes) >= 10_000 and max(sizes) <= 30_000
    assert by["joints/position"].values.shape[1] == 8 and by["ee/pose"].frame == "ros"
    q = by["ee/pose"].values[:, 3:]
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-9)


def test_demo_reuses_the_episodes_it_made_with_the_same_config(tmp_path, monkeypatch):
    import rayform
    from rayform.converters import demo

    client = rayform.Client(tmp_path / "store")
    config = DemoConfig(episodes=2, seconds=1.0, image_size=16)
    first = demo.ingest_demo(client, "lab", config)
    made = []
    real = demo.demo_episode
    monkeypatch.setattr(demo, "demo_episode", lambda c, e: made.append(e) or real(c, e))
    assert demo.ingest_demo(client, "lab", config) == first and made == []  # nothing simulated again
    other = demo.ingest_demo(client, "lab", DemoConfig(episodes=2, seconds=1.0, image_size=16, seed=5))
    assert made == [0, 1] and [r.version for r in other] != [r.version for r in first]


def test_a_demo_stopped_midway_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    """Ctrl-C after some episodes: none of them is listed, and none of their blobs is left."""
    import pytest

    import rayform
    from rayform.converters import demo

    client = rayform.Client(tmp_path / "store")
    demo.ingest_demo(client, "other", DemoConfig(episodes=1, seconds=1.0, image_size=16))
    before = sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file())
    real = demo.demo_episode

    def stopped_at_the_third(config, episode):
        if episode == 2:
            raise KeyboardInterrupt
        return real(config, episode)

    monkeypatch.setattr(demo, "demo_episode", stopped_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        demo.ingest_demo(client, "lab", DemoConfig(episodes=4, seconds=1.0, image_size=16))
    assert client.segments.sites() == ["other"]
    assert sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file()) == before
