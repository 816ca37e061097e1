"""Both datasets over a video pack: the samples a JPEG pack of the same slice gives (images up
to the codec's error, everything else exactly), streamed in the same kind of order, resumable
at another topology, each clip decoded once."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import moving_texture
from torch.utils.data import DataLoader

import rayform
from rayform.codec.video import psnr
from rayform.pack.layout import CLIPS
from rayform.read.reader import PackReader
from rayform.torch.world import Split, World

KW = dict(obs=["cam/rgb", "joints"], action="joints_delta", fps=30, horizon=8, history={"cam/rgb": 3, "joints": 2})


def _by_key(samples) -> dict[tuple[int, int], dict]:
    return {(int(x["meta"]["episode_index"]), int(x["meta"]["frame_index"])): x for x in samples}


def _frames(episode: int) -> np.ndarray:
    return moving_texture(48, 64, seed=episode)  # what add_video_slice recorded


def _check_same(video: dict, jpeg: dict, key: tuple[int, int]) -> None:
    for name in ("action", "joints"):
        np.testing.assert_allclose(video[name].numpy(), jpeg[name].numpy(), rtol=1e-6, atol=1e-7)
    for name in ("action_is_pad", "cam/rgb_is_pad", "joints_is_pad", "t_ns"):
        assert np.array_equal(video[name].numpy(), jpeg[name].numpy()), name
    assert video["meta"] == jpeg["meta"]
    episode, step = key
    frames = _frames(episode)
    for k, back in enumerate((2, 1, 0)):  # history 3: two steps back, one, now
        want = frames[max(step - back, 0)]
        got, ref = video["cam/rgb"][k].numpy().transpose(1, 2, 0), jpeg["cam/rgb"][k].numpy().transpose(1, 2, 0)
        assert psnr(got, want) > psnr(ref, want) - 3  # the frame it should be, to the codec's error
        if step - back > 0:
            assert psnr(got, want) > psnr(got, frames[step - back - 1]) + 3  # not its neighbour


def test_episode_dataset_gives_a_jpeg_pack_s_samples(video_packs):
    client, s, jpeg, h264 = video_packs
    video = rayform.torch.EpisodeDataset(s, **KW, pack=h264.key)
    ref = rayform.torch.EpisodeDataset(s, **KW, pack=jpeg.key)
    assert len(video) == len(ref) == 3 * 48
    v, j = _by_key(video[i] for i in range(len(video))), _by_key(ref[i] for i in range(len(ref)))
    assert v.keys() == j.keys()
    for key in v:
        _check_same(v[key], j[key], key)
    clips = video.builders[0].clips
    assert clips.built == len(video) and clips.decoded <= 4.5 * len(video)  # from the keyframe, not the file


def test_streaming_gives_the_same_samples_once_each_through_forked_workers(video_packs):
    client, s, jpeg, h264 = video_packs
    ref = _by_key(rayform.torch.EpisodeDataset(s, **KW, pack=jpeg.key)[i] for i in range(3 * 48))
    ds = rayform.torch.StreamingEpisodeDataset(s, **KW, pack=h264.key, batch_size=8)
    seen = []
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        for j in range(len(batch["t_ns"])):
            x = {k: (v[j] if k != "meta" else {m: (w[j] if isinstance(w, list) else int(w[j]))
                                               for m, w in v.items()}) for k, v in batch.items()}
            key = (x["meta"]["episode_index"], x["meta"]["frame_index"])
            seen.append(key)
            _check_same(x, ref[key], key)
    assert len(seen) == len(ds) and set(seen) == set(ref)  # every sample, the last batch padded
    assert len(seen) - len(set(seen)) == len(ds) - len(ref)


def _steps(ds, world: int, workers: int) -> dict[int, list[str]]:
    steps: dict[int, list[str]] = {}
    for rank in range(world):
        for worker in range(workers):
            for step, raws in ds.raw_steps(World(rank, world, worker, workers)):
                steps.setdefault(step, []).extend(raw["__key__"] for raw in raws)
    return dict(sorted(steps.items()))


def test_the_order_holds_at_any_topology_and_resumes_at_another(video_packs):
    client, s, _, h264 = video_packs

    def dataset(world: int, rank: int = 0):
        return rayform.torch.StreamingEpisodeDataset(s, **KW, pack=h264.key, batch_size=16 // world, seed=3,
                                                     split=Split(rank, world, partitions=2))

    reference = _steps(dataset(1), 1, 1)
    assert _steps(dataset(2), 2, 2) == reference == _steps(dataset(4), 4, 3)
    assert len({k for keys in reference.values() for k in keys}) == 3 * 48
    assert {len(dataset(4, r)) for r in range(4)} == {len(dataset(4))}  # equal counts
    resumed = dataset(2)
    resumed.load_state_dict(dataset(4).state_dict(step=3))
    assert _steps(resumed, 2, 2) == {k: v for k, v in reference.items() if k >= 3}


def test_a_stream_decodes_each_clip_once_and_its_batches_are_well_mixed(video_packs):
    client, s, _, h264 = video_packs
    reader = PackReader(client.store, h264, [CLIPS])
    from rayform.codec import records

    in_clips = sum(records.loads(bytes(raw[CLIPS]))["video"]["cam/rgb"]["frames"]
                   for i, (_, raw) in enumerate(reader.raw_many(range(h264.samples))) if raw["__clip__"][2] == 0)
    ds = rayform.torch.StreamingEpisodeDataset(s, **KW, pack=h264.key, batch_size=12)
    episodes = [len(set(b["meta"]["episode_index"].tolist())) for b in ds]
    assert ds.builders[0].clips.decoded == in_clips  # each clip once, whole
    assert np.mean(episodes) > 2.5  # of 3: every batch draws on many clips, not one or two


def test_a_decoded_frame_budget_of_zero_still_gives_every_sample(video_packs, monkeypatch):
    monkeypatch.setenv("RAYFORM_DECODED_FRAMES", "0")
    client, s, jpeg, h264 = video_packs
    ds = rayform.torch.StreamingEpisodeDataset(s, **KW, pack=h264.key, batch_size=12)
    assert sum(len(b["t_ns"]) for b in ds) == len(ds)
    assert ds.builders[0].clips._bytes == 0


@pytest.mark.parametrize("resize", [(32, 48)])
def test_frames_decode_at_the_size_a_dataset_asks(video_packs, resize):
    client, s, _, h264 = video_packs
    x = rayform.torch.EpisodeDataset(s, **KW, pack=h264.key, resize=resize)[7]
    assert x["cam/rgb"].shape == (3, 3, *resize)


def _batches(s, pack, **kw) -> list[frozenset]:
    ds = rayform.torch.StreamingEpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2, pack=pack.key,
                                               batch_size=32, **kw)
    return [frozenset(zip(b["meta"]["episode_index"].tolist(), b["meta"]["frame_index"].tolist())) for b in ds]


@pytest.mark.parametrize("codec", ["h264", "jpeg"])
def test_a_one_shard_pack_makes_other_batches_every_epoch_and_seed(one_shard, codec):
    s, packs = one_shard
    first = _batches(s, packs[codec], seed=0)
    for other in (_batches(s, packs[codec], seed=1), _epoch_1(s, packs[codec])):
        assert len(set(first) & set(other)) <= len(first) // 4


def _epoch_1(s, pack):
    ds = rayform.torch.StreamingEpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2, pack=pack.key,
                                               batch_size=32)
    ds.set_epoch(1)
    return [frozenset(zip(b["meta"]["episode_index"].tolist(), b["meta"]["frame_index"].tolist())) for b in ds]


@pytest.mark.parametrize("codec", ["h264", "jpeg"])
@pytest.mark.parametrize("form", ["the dataset's batches", "the DataLoader's batches"])
def test_batches_are_mixed_however_they_are_made(one_shard, codec, form):
    """The README's plain loop (the DataLoader making the batches, 2 workers) mixes a video
    pack's samples as well as the dataset's own batches do: as well as uniform sampling."""
    from torch.utils.data import DataLoader

    from rayform.diagnostics.batch_mixing import mixing

    s, packs = one_shard
    kw = dict(obs=["cam/rgb"], action="joints", fps=30, horizon=2, pack=packs[codec].key)
    if form == "the dataset's batches":
        loader = DataLoader(rayform.torch.StreamingEpisodeDataset(s, **kw, batch_size=32), batch_size=None, num_workers=2)
    else:
        loader = DataLoader(rayform.torch.StreamingEpisodeDataset(s, **kw), batch_size=32, num_workers=2)
    mixed = mixing([b["meta"]["episode_index"].tolist() for b in loader], 24)
    assert mixed.ratio >= 0.9, mixed


def _decoded_per_sample(ds, loader_kw) -> tuple[float, list[list[int]], list[int]]:
    loader = DataLoader(ds, num_workers=0, **loader_kw)
    episodes, ids = [], []
    for b in loader:
        episodes.append(b["meta"]["episode_index"].tolist())
        ids += [e * 1000 + f for e, f in zip(b["meta"]["episode_index"].tolist(), b["meta"]["frame_index"].tolist())]
    clips = ds.builders[0].clips
    return clips.decoded / clips.built, episodes, ids


def test_given_its_batch_size_a_map_style_dataset_decodes_each_clip_once_in_well_mixed_batches(one_shard):
    """EpisodeDataset(batch_size=…) with the DataLoader in order: every sample once, each clip
    decoded about once (shuffled indices decode from the keyframe for each sample), batches as
    mixed as uniform sampling, and another order every epoch and seed."""
    from rayform.diagnostics.batch_mixing import mixing

    s, packs = one_shard
    kw = dict(obs=["cam/rgb"], action="joints", fps=30, horizon=2, pack=packs["h264"].key)
    ordered = rayform.torch.EpisodeDataset(s, **kw, batch_size=32)
    per, episodes, ids = _decoded_per_sample(ordered, dict(batch_size=32, shuffle=False))
    assert len(ids) == len(set(ids)) == len(ordered)  # each sample once
    assert per <= 1.3, per
    assert mixing(episodes, 24).ratio >= 0.9
    shuffled = rayform.torch.EpisodeDataset(s, **kw)
    per_shuffled, _, _ = _decoded_per_sample(shuffled, dict(batch_size=32, shuffle=True))
    assert per_shuffled >= 2 * per  # what the clip-aware order saves
    for other in (rayform.torch.EpisodeDataset(s, **kw, batch_size=32, seed=1), ordered):
        if other is ordered:
            other.set_epoch(1)
        _, _, again = _decoded_per_sample(other, dict(batch_size=32, shuffle=False))
        assert sorted(again) == sorted(ids) and again != ids


def test_a_clip_aware_order_through_forked_workers_gives_every_sample_once(one_shard):
    s, packs = one_shard
    ds = rayform.torch.EpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2, pack=packs["h264"].key,
                                      batch_size=16)
    ids = [(e, f) for b in DataLoader(ds, batch_size=16, num_workers=2)
           for e, f in zip(b["meta"]["episode_index"].tolist(), b["meta"]["frame_index"].tolist())]
    assert len(ids) == len(set(ids)) == len(ds)


def test_a_shuffled_video_pack_is_told_once_how_to_read_it_a_clip_at_a_time(one_shard, caplog):
    s, packs = one_shard
    kw = dict(obs=["cam/rgb"], action="joints", fps=30, horizon=2, pack=packs["h264"].key)
    with caplog.at_level("WARNING", logger="rayform"):
        for _ in DataLoader(rayform.torch.EpisodeDataset(s, **kw), batch_size=32, shuffle=True):
            pass
        hints = [r.getMessage() for r in caplog.records if "batch_size=<the DataLoader's>" in r.getMessage()]
        assert len(hints) == 1 and "frames a sample" in hints[0]
        caplog.clear()
        for _ in DataLoader(rayform.torch.EpisodeDataset(s, **kw, batch_size=32), batch_size=32):
            pass
        for _ in DataLoader(rayform.torch.EpisodeDataset(s, **{**kw, "pack": packs["jpeg"].key}), batch_size=32,
                            shuffle=True):
            pass
        assert not [r for r in caplog.records if "batch_size=<the DataLoader's>" in r.getMessage()]


def test_reading_a_video_pack_sample_by_sample_says_it_is_slow_and_how_to_fix_it(video_packs, caplog):
    _, s, _, video = video_packs
    with caplog.at_level("WARNING", logger="rayform"):
        rayform.torch.StreamingEpisodeDataset(s, **KW, pack=video.key, batch_size=8)
    assert not [r for r in caplog.records if "sample by sample" in r.getMessage()]
    with caplog.at_level("WARNING", logger="rayform"):
        rayform.torch.StreamingEpisodeDataset(s, **KW, pack=video.key)
    [said] = [r.getMessage() for r in caplog.records if "sample by sample" in r.getMessage()]
    assert video.key in said and "batch_size=<the DataLoader's>" in said and "DataLoader(dataset, batch_size=None)" in said


@pytest.mark.parametrize("form", ["StreamingEpisodeDataset", "EpisodeDataset"])
def test_a_video_packs_dataset_imports_what_its_workers_decode_with_before_they_fork(video_packs, form):
    """A forked DataLoader worker has what the process that made the dataset imported: PyAV for
    a video pack (not for a JPEG one), and numpy's lazily imported parts the order and np.unique
    use; else each worker imports them (~60 ms) before its first batch of every first epoch."""
    import subprocess
    import sys

    client, s, jpeg, h264 = video_packs
    code = ("import sys, rayform.torch\n"
            "client = rayform.Client(sys.argv[1])\n"
            f"rayform.torch.{form}(client.slices.get(sys.argv[2]), obs=['cam/rgb'], fps=30, pack=sys.argv[3])\n"
            "print(*[m in sys.modules for m in ('av', 'numpy.ma', 'numpy.random')])")
    store = client.store.url
    for pack, av in ((h264, "True"), (jpeg, "False")):
        out = subprocess.run([sys.executable, "-c", code, store, s.id, pack.key], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-1500:]
        assert out.stdout.split() == [av, "True", "True"]
