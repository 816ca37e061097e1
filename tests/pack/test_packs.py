"""Which pack a dataset reads: one that serves what it asks (streams, horizon, history, and the
images' size: a resized pack serves only its own), full resolution before resized, then the
newest, never by the digest's chance; or the one it names."""

from __future__ import annotations

import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import InvalidInput, PackNotFound

KW = dict(obs=["cam0/rgb", "joints/position"], action="joints/position_delta", fps=15, horizon=4)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("packs") / "store")
    refs = ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=2.0, image_size=32))
    return client, refs


def _slice(client, refs, name: str):
    return client.slices.create(refs, name=name)  # the name makes another slice id, and digests


def _made(client, s, **spec):
    return client.pack(s, 15, workers=1, progress=False, max_horizon=4, **spec)


@pytest.mark.parametrize("dataset", ["EpisodeDataset", "StreamingEpisodeDataset"])
def test_a_full_and_a_resized_pack_each_serve_their_own_asks_over_many_slices(store, dataset):
    client, refs = store
    make = getattr(rayform.torch, dataset)
    for i in range(6):  # six slices: six orders of the packs' digests
        s = _slice(client, refs, f"both-{dataset}-{i}")
        full, small = _made(client, s), _made(client, s, resize=(8, 8))  # the resized one is the newer
        assert make(s, **KW).pack.key == full.key  # the recorded size: never the resized pack
        assert make(s, **KW, resize=(16, 16)).pack.key == full.key  # decoded at 16x16, not upscaled from 8x8
        assert make(s, **KW, resize=(8, 8)).pack.key == full.key  # full resolution first
        assert make(s, **KW, resize=(8, 8), pack=small.key).pack.key == small.key


def test_a_slice_with_only_a_resized_pack_serves_its_size_and_refuses_the_rest(store):
    client, refs = store
    s = _slice(client, refs, "only-small")
    small = _made(client, s, resize=(8, 8))
    ds = rayform.torch.EpisodeDataset(s, **KW, resize=(8, 8))
    assert ds.pack.key == small.key and ds[0]["cam0/rgb"].shape == (3, 8, 8)
    with pytest.raises(InvalidInput, match=r"resized to 8x8; the dataset asks their recorded size .* Ask resize=\(8, 8\)"):
        rayform.torch.EpisodeDataset(s, **KW)
    with pytest.raises(InvalidInput, match=r"resized to 8x8; the dataset asks \(16, 16\)"):
        rayform.torch.StreamingEpisodeDataset(s, **KW, resize=(16, 16))
    with pytest.raises(PackNotFound, match=r"resized to 8x8, not its recorded size\. Ask resize=\(8, 8\)"):
        client.packs.find(s, 15)
    assert client.packs.find(s, 15, any_size=True).key == small.key  # statistics, say: any size serves
    assert len(client.packs.list(s)) == 1  # nothing packed behind the user's back


def test_among_packs_that_serve_the_newest_is_read(store):
    client, refs = store
    for first, second in ((0, 3), (3, 0)):
        s = _slice(client, refs, f"newest-{first}-{second}")
        _made(client, s, interleave_seed=first)
        newer = _made(client, s, interleave_seed=second)
        assert rayform.torch.EpisodeDataset(s, **KW).pack.key == newer.key


def test_a_named_pack_is_read_and_a_bad_name_is_one_error(store):
    client, refs = store
    s = _slice(client, refs, "named")
    older = _made(client, s, interleave_seed=None)
    _made(client, s)
    for make in (rayform.torch.EpisodeDataset, rayform.torch.StreamingEpisodeDataset):
        assert make(s, **KW, pack=older.key).pack.key == older.key
        assert make(s, **KW, pack=older).pack.key == older.key  # a Pack names itself
    with pytest.raises(PackNotFound, match=f"{s.id}: no pack fps15-00000000"):
        rayform.torch.EpisodeDataset(s, **KW, pack="fps15-00000000")
    with pytest.raises(InvalidInput, match=f"pack {older.key} is at 15 fps, the dataset asks 30"):
        rayform.torch.EpisodeDataset(s, **{**KW, "fps": 30}, pack=older.key)
    short = _made(client, s, max_history=0, streams=["joints/position"])
    with pytest.raises(rayform.StreamNotFound, match=f"no stream 'cam0/rgb' in its pack {short.key}"):
        rayform.torch.EpisodeDataset(s, **KW, pack=short.key)
