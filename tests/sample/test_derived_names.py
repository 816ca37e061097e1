"""Names the packer and the datasets derive (a stream's delta, its history mask, the sample's own
keys) never collide with names a source records: RT-1 records ``action/rotation_delta``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rayform
from rayform.errors import InvalidInput
from rayform.recordings.streams import RESERVED, ArrayStream

FPS = 10
STEPS = 12
H = 3
BASES = ["x", "arm/joint"]
SUFFIXES = ["", "_delta", "_delta_delta", "_is_pad", "_mask", "_value", "/t_ns", "/meta", "/action"]


def _slice(client, names: list[str], seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS, dtype=np.int64) * (1_000_000_000 // FPS)
    recorded = {n: rng.normal(size=(STEPS, 2)).astype(np.float32) for n in names}
    ref = client.segments.add("lab", "ep", [ArrayStream(n, t, v) for n, v in recorded.items()])
    s = client.slices.create([ref], name="names")
    client.pack(s, FPS, max_horizon=H, max_history=2, workers=1, progress=False)
    return s, recorded


def _step(sample) -> int:
    """The recorded step a sample is at (a pack's samples are in its own order)."""
    return int(sample["t_ns"]) // (1_000_000_000 // FPS)


def _window(values: np.ndarray, i: int) -> np.ndarray:
    """The recorded steps i+1 … i+H, the last held past the end."""
    return values[np.minimum(np.arange(i + 1, i + H + 1), STEPS - 1)]


def test_an_rt1_slice_packs_and_its_recorded_delta_is_its_own_values(client):
    s, recorded = _slice(client, ["action/rotation_delta", "action/world_vector"])
    rot = recorded["action/rotation_delta"]
    ds = rayform.torch.EpisodeDataset(s, obs=["action/world_vector"], action="action/rotation_delta", fps=FPS,
                                      horizon=H)
    derived = rayform.torch.EpisodeDataset(s, obs=["action/world_vector"], action="action/rotation_delta:delta",
                                           fps=FPS, horizon=H)
    for j in range(STEPS):
        i = _step(ds[j])
        assert np.array_equal(ds[j]["action"].numpy(), _window(rot, i))
        i = _step(derived[j])
        assert np.array_equal(derived[j]["action"].numpy(), _window(rot, i) - rot[i])
    stats = ds.stats
    assert np.allclose(stats["action/rotation_delta"]["mean"], rot.mean(axis=0), atol=1e-6)
    steps = np.concatenate([rot[i + 1:i + H + 1] - rot[i] for i in range(STEPS - 1)])
    assert np.allclose(stats["action/rotation_delta:delta"]["mean"], steps.mean(axis=0), atol=1e-6)
    # normalizing the action reads the recorded stream's statistics, not its delta's
    norm = rayform.torch.EpisodeDataset(s, obs=["action/world_vector"], action="action/rotation_delta", fps=FPS,
                                        horizon=H, normalize={"action": "min_max"})
    lo, hi = rot.min(axis=0), rot.max(axis=0)
    first = norm[0]
    assert np.allclose(first["action"].numpy(), (_window(rot, _step(first)) - lo) / (hi - lo) * 2 - 1, atol=1e-5)


def test_the_cli_prints_each_statistics_under_its_own_name(tmp_path):
    client = rayform.Client(tmp_path / "store")
    s, _ = _slice(client, ["x_delta", "x"])
    r = subprocess.run([sys.executable, "-m", "rayform.cli.main", "--store", str(tmp_path / "store"), "stats", s.id,
                        "--fps", str(FPS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    printed = [line.split("  ")[0] for line in r.stdout.splitlines() if "count" in line]
    assert sorted(printed) == ["x", "x:delta", "x_delta", "x_delta:delta"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.sets(st.sampled_from([b + s for b in BASES for s in SUFFIXES]), min_size=1, max_size=6),
       seed=st.integers(0, 1000))
def test_any_recorded_names_pack_and_read_back_exactly(tmp_path_factory, chosen, seed):
    client = rayform.Client(tmp_path_factory.mktemp("names") / "store")
    names = sorted(chosen)
    s, recorded = _slice(client, names, seed)
    pack = client.packs.find(s.id, FPS)
    assert set(pack.stats or {}) == {*names, *(n + ":delta" for n in names)}
    for name in names:
        ds = rayform.torch.EpisodeDataset(s, obs=names, action=name, fps=FPS, horizon=H)
        delta = rayform.torch.EpisodeDataset(s, obs=[name], action=name + ":delta", fps=FPS, horizon=H)
        for j in (0, STEPS // 2, STEPS - 1):
            sample = ds[j]
            i = _step(sample)
            for other in names:
                assert np.array_equal(sample[other].numpy(), recorded[other][i])
            assert np.array_equal(sample["action"].numpy(), _window(recorded[name], i))
            i = _step(delta[j])
            assert np.array_equal(delta[j]["action"].numpy(), _window(recorded[name], i) - recorded[name][i])
        short = name + "_delta"  # the short spelling: the recorded stream if there is one, else the delta
        got = rayform.torch.EpisodeDataset(s, obs=[name], action=short, fps=FPS, horizon=H)[1]
        i = _step(got)
        want = _window(recorded[short], i) if short in recorded else _window(recorded[name], i) - recorded[name][i]
        assert np.array_equal(got["action"].numpy(), want)
        with_history = {name: 2}
        if name + "_is_pad" in names:  # the history mask of name would be a recorded stream's key
            with pytest.raises(InvalidInput, match="_is_pad.*rename the stream"):
                rayform.torch.EpisodeDataset(s, obs=names, fps=FPS, history=with_history)
        else:
            past = rayform.torch.EpisodeDataset(s, obs=names, fps=FPS, history=with_history)
            first = next(p for p in (past[j] for j in range(STEPS)) if _step(p) == 0)
            assert np.array_equal(first[name].numpy()[1], recorded[name][0])
            assert first[name + "_is_pad"].tolist() == [True, False]


@pytest.mark.parametrize("name", sorted(RESERVED))
def test_a_sample_key_is_refused_as_a_stream_name_at_ingest(client, name):
    with pytest.raises(InvalidInput, match="stream name"):
        client.segments.add("lab", "ep", [ArrayStream(name, np.arange(3, dtype=np.int64), np.zeros((3, 1)))])
