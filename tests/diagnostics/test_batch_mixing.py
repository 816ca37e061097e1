"""Batches streamed from an interleaved pack are as mixed as random ones; from a pack in time
order they are not (so the measure can fail)."""

from __future__ import annotations

import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.diagnostics.batch_mixing import mixing, uniform_distinct

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

EPISODES = 24
OBS = ["joints/position"]


@pytest.fixture(scope="module")
def many_episodes(tmp_path_factory):
    """The same many-episode slice in two stores: packed interleaved (the default) in one, in
    time order in the other."""
    config = DemoConfig(episodes=EPISODES, seconds=4.0, seed=11, image_size=16)
    shard = 1 << 20  # eight shards or so, each three episodes long when written in time order
    out = []
    for seed in (0, None):
        client = rayform.Client(tmp_path_factory.mktemp("mixing") / "store")
        s = client.slices.create(ingest_demo(client, "lab", config, progress=False), name="many")
        pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=shard, interleave_seed=seed)
        assert len(pack.shards) >= 4
        out.append((s, pack))
    return out


def _episodes(loader) -> list[list[str]]:
    return [list(batch["meta"]["segment"]) for batch in loader]


def _streamed(s):
    return rayform.torch.StreamingEpisodeDataset(s, obs=OBS, action="joints/position_delta", fps=15,
                                                 shuffle=rayform.torch.ShuffleConfig(window=100))


def test_the_uniform_expectation():
    assert uniform_distinct(40, 64) == pytest.approx(32.1, abs=0.05)  # the figure
    assert uniform_distinct(1, 64) == 1.0


@pytest.mark.parametrize("workers", [0, 2])
def test_streamed_batches_of_an_interleaved_pack_are_as_mixed_as_random_ones(many_episodes, workers):
    (s, interleaved), _ = many_episodes
    ds = _streamed(s)
    assert ds.pack.digest == interleaved.digest
    mixed = mixing(_episodes(DataLoader(ds, batch_size=64, num_workers=workers)), EPISODES)
    assert mixed.ratio >= 0.9 and abs(mixed.lag1) < 0.05, mixed


def test_a_pack_in_time_order_streams_poorly_mixed_batches(many_episodes, caplog):
    """The same measure on the same slice packed in time order: it fails by far (and the
    dataset says so when it is made)."""
    _, (s, in_time) = many_episodes
    ds = _streamed(s)
    assert f"in time order, so streamed batches hold few episodes. For an interleaved one run: rayform pack {s.id}" \
        in caplog.text
    assert ds.pack.digest == in_time.digest and ds.pack.spec.interleave_seed is None
    poor = mixing(_episodes(DataLoader(ds, batch_size=64, num_workers=2)), EPISODES)
    assert poor.ratio < 0.5 and poor.lag1 > 0.1, poor


def test_random_access_batches_are_as_mixed_as_random_ones(many_episodes):
    for s, _ in many_episodes:
        ds = rayform.torch.EpisodeDataset(s, obs=OBS, action="joints/position_delta", fps=15)
        loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=2, generator=torch.Generator().manual_seed(0))
        mixed = mixing(_episodes(loader), EPISODES)
        assert mixed.ratio >= 0.9 and abs(mixed.lag1) < 0.05, mixed
