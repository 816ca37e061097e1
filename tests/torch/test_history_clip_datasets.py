"""Both datasets over a video pack with history (clips of 64 samples, a keyframe every 8):
the samples a JPEG pack gives, each history frame the very frame the sample it looks back on
shows, every group of pictures decoded about once, a few groups' frames held at a time, and
batches as mixed as uniform sampling however they are made."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import add_video_slice, moving_texture
from torch.utils.data import DataLoader

import rayform
from rayform.codec import records
from rayform.codec.video import psnr
from rayform.pack.layout import CLIPS
from rayform.read.reader import PackReader

BACK = (4, 3, 2, 1, 0)
KW = dict(obs=["cam/rgb", "joints"], action="joints_delta", fps=30, horizon=8, history={"cam/rgb": 5, "joints": 3})


def _key(x) -> tuple[int, int]:
    return int(x["meta"]["episode_index"]), int(x["meta"]["frame_index"])


def _unbatch(batch) -> list[dict]:
    return [{k: (v[j] if k != "meta" else {m: (w[j] if isinstance(w, list) else int(w[j])) for m, w in v.items()})
             for k, v in batch.items()} for j in range(len(batch["t_ns"]))]


def test_samples_are_a_jpeg_pack_s_and_history_frames_are_the_frames_shown_before(history_clip_packs,
                                                                                 history_jpeg_pack):
    client, s, history, _ = history_clip_packs
    video = rayform.torch.EpisodeDataset(s, **KW, pack=history.key)
    ref = rayform.torch.EpisodeDataset(s, **KW, pack=history_jpeg_pack.key)
    v = {_key(x): x for x in (video[i] for i in range(len(video)))}
    j = {_key(x): x for x in (ref[i] for i in range(len(ref)))}
    assert v.keys() == j.keys() and len(v) == 3 * 150
    across = 0
    for (episode, step), x in v.items():
        y = j[(episode, step)]
        for name in ("action", "joints"):
            np.testing.assert_allclose(x[name].numpy(), y[name].numpy(), rtol=1e-6, atol=1e-7)
        for name in ("action_is_pad", "cam/rgb_is_pad", "joints_is_pad", "t_ns"):
            assert np.array_equal(x[name].numpy(), y[name].numpy()), name
        frames = moving_texture(150, 64, seed=episode)
        for k, back in enumerate(BACK):
            got = x["cam/rgb"][k].numpy().transpose(1, 2, 0)
            want = frames[max(step - back, 0)]
            # the pack's quality is 1.4 dB below JPEG q90's on average, a frame's a few dB more
            assert psnr(got, want) > psnr(y["cam/rgb"][k].numpy().transpose(1, 2, 0), want) - 4.5
            if step - back > 0:
                assert psnr(got, want) > psnr(got, frames[step - back - 1]) + 3  # not its neighbour
            earlier = step - back
            if earlier >= 0 and earlier // 64 == step // 64:  # in the same clip: the same decoded frame
                assert np.array_equal(x["cam/rgb"][k].numpy(), v[(episode, earlier)]["cam/rgb"][-1].numpy())
            elif earlier >= 0:
                across += 1  # the clip's lead: encoded again, to the codec's error
    assert across == 3 * 2 * (4 + 3 + 2 + 1)


def _stored_frames(client, pack) -> int:
    reader = PackReader(client.store, pack, [CLIPS])
    return sum(records.loads(bytes(raw[CLIPS]))["video"]["cam/rgb"]["frames"]
               for _, raw in reader.raw_many(range(pack.samples)) if raw["__clip__"][2] == 0)


def test_a_stream_decodes_each_group_about_once_holding_a_few_at_a_time(history_clip_packs):
    client, s, history, _ = history_clip_packs
    ds = rayform.torch.StreamingEpisodeDataset(s, **KW, pack=history.key, batch_size=2)
    keys = [_key(x) for b in ds for x in _unbatch(b)]
    assert len(set(keys)) == 3 * 150
    clips = ds.builders[0].clips
    assert clips.decoded <= 1.15 * _stored_frames(client, history)  # lanes straddling two clips decode a group twice
    frame = 64 * 64 * 3
    # 2 slots x 2 batches of stride: 4 lanes, each holding its group, the lead or the last
    # frames of the group before (whole clips of 68 frames would be 4 x 68)
    assert clips.peak <= 4 * 24 * frame, clips.peak / frame


def test_streaming_through_forked_workers_gives_every_sample_once(history_clip_packs, history_jpeg_pack):
    client, s, history, _ = history_clip_packs
    ds = rayform.torch.StreamingEpisodeDataset(s, **KW, pack=history.key, batch_size=8)
    ref = rayform.torch.EpisodeDataset(s, **KW, pack=history_jpeg_pack.key)
    seen = {}
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        for x in _unbatch(batch):
            seen.setdefault(_key(x), x)
    assert len(seen) == len(ref)
    for i in range(0, len(ref), 7):
        y = ref[i]
        x = seen[_key(y)]
        assert np.array_equal(x["cam/rgb_is_pad"].numpy(), y["cam/rgb_is_pad"].numpy())
        assert psnr(x["cam/rgb"].numpy(), y["cam/rgb"].numpy()) > 28


def test_random_order_decodes_from_a_group_s_keyframe_not_the_clip_s(history_clip_packs):
    client, s, history, _ = history_clip_packs
    ds = rayform.torch.EpisodeDataset(s, **KW, pack=history.key)
    for i in np.random.default_rng(0).permutation(len(ds))[:60].tolist():
        ds[i]
    clips = ds.builders[0].clips
    assert clips.decoded <= 16 * clips.built  # at most a group before and its own, not 68 frames a sample


@pytest.fixture(scope="module")
def many_episodes(tmp_path_factory):
    """24 episodes of 150 tiny frames, packed as H.264 with history 4 (clips of 64)."""
    client = rayform.Client(tmp_path_factory.mktemp("history-many") / "store")
    s = add_video_slice(client, episodes=24, frames=150, size=16, name="many-long")
    pack = client.pack(s, 30, image_codec="h264", max_history=4, max_horizon=2, workers=1, progress=False)
    assert pack.spec.clip_frames == 64
    return s, pack


@pytest.mark.parametrize("form", ["the dataset's batches", "the DataLoader's batches", "map-style"])
def test_batches_of_long_clips_are_mixed_however_they_are_made(many_episodes, form):
    from rayform.diagnostics.batch_mixing import mixing

    s, pack = many_episodes
    kw = dict(obs=["cam/rgb"], action="joints", fps=30, horizon=2, history={"cam/rgb": 3}, pack=pack.key)
    if form == "the dataset's batches":
        loader = DataLoader(rayform.torch.StreamingEpisodeDataset(s, **kw, batch_size=32), batch_size=None,
                            num_workers=2)
    elif form == "the DataLoader's batches":
        loader = DataLoader(rayform.torch.StreamingEpisodeDataset(s, **kw), batch_size=32, num_workers=2)
    else:
        loader = DataLoader(rayform.torch.EpisodeDataset(s, **kw, batch_size=32), batch_size=32, num_workers=2)
    batches = [b["meta"]["episode_index"].tolist() for b in loader]
    assert sum(map(len, batches)) >= 24 * 150
    mixed = mixing(batches, 24)
    assert mixed.ratio >= 0.9, mixed


def test_long_clips_are_shuffled_anew_every_epoch_and_seed(many_episodes):
    s, pack = many_episodes

    def batches(seed: int, epoch: int) -> list[frozenset]:
        ds = rayform.torch.StreamingEpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2,
                                                   pack=pack.key, batch_size=32, seed=seed)
        ds.set_epoch(epoch)
        return [frozenset(zip(b["meta"]["episode_index"].tolist(), b["meta"]["frame_index"].tolist())) for b in ds]

    first = batches(0, 0)
    for other in (batches(1, 0), batches(0, 1)):
        assert len(set(first) & set(other)) <= len(first) // 4


def test_a_clip_aware_order_is_not_told_to_read_clip_by_clip(many_episodes, caplog):
    s, pack = many_episodes
    ds = rayform.torch.EpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2, history={"cam/rgb": 5},
                                      pack=pack.key, batch_size=64)
    with caplog.at_level("WARNING", logger="rayform"):
        for _ in DataLoader(ds, batch_size=64):
            pass
    assert not [r for r in caplog.records if "batch_size=<the DataLoader's>" in r.getMessage()]
    clips = ds.builders[0].clips
    assert clips.built == len(ds) and clips.decoded <= 1.2 * clips.built


def test_the_decoded_frame_budget_holds_what_the_lanes_read_at_once(history_clip_packs, monkeypatch):
    """A budget below the lanes' frames would let go of what a lane needs next, lane after
    lane: by default the budget grows to hold them."""
    from rayform import config

    monkeypatch.setattr(config, "DECODED_FRAMES", 64 << 10)  # a few frames, less than the lanes hold
    client, s, history, _ = history_clip_packs
    ds = rayform.torch.EpisodeDataset(s, **KW, pack=history.key, batch_size=4)
    for _ in DataLoader(ds, batch_size=4):
        pass
    clips = ds.builders[0].clips
    stored = _stored_frames(client, history)
    assert clips.built == len(ds) and clips.decoded <= 1.2 * stored
    assert clips.limit < stored * 64 * 64 * 3 / 2  # room for 8 lanes' frames, not for the pack's
