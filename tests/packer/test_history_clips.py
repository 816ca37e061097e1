"""A video pack with history: clips of 64 samples, a keyframe every 8, the frames a clip's
first sample looks back on in its first group. History then costs those few frames a clip,
not a copy of every frame it shows again."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import add_video_slice

import rayform
from rayform.codec import records
from rayform.codec.video import PyAVDecoder
from rayform.pack.layout import CLIPS
from rayform.pack.spec import PackSpec
from rayform.read.reader import PackReader


def _clips(client, pack) -> list[dict]:
    """Each clip's document, in pack order."""
    reader = PackReader(client.store, pack, [CLIPS])
    return [records.loads(bytes(raw[CLIPS])) for _, raw in reader.raw_many(range(pack.samples))
            if raw["__clip__"][2] == 0]


def test_the_default_with_history_is_long_clips_a_keyframe_every_8():
    spec = PackSpec(15, image_codec="h264", max_history=4)
    assert (spec.clip_frames, spec.gop_frames, spec.keyframe_every) == (64, 8, 8)
    assert PackSpec.from_manifest(spec.to_manifest()) == spec
    for plain in (PackSpec(15, image_codec="h264"), PackSpec(15, image_codec="jpeg", max_history=4),
                  PackSpec(15, image_codec="h264", max_history=4, clip_frames=8)):
        assert (plain.clip_frames, plain.gop_frames) == (8, None)  # as packs were: the same keys
        assert "gop_frames" not in plain.to_manifest() and "clip_frames" not in plain.to_manifest()
    old = {k: v for k, v in spec.to_manifest().items() if k not in ("clip_frames", "gop_frames")}
    assert PackSpec.from_manifest(old).clip_frames == 8  # a history pack from before reads as it was made


def test_a_history_clip_stores_its_samples_frames_and_its_history_once(history_clip_packs):
    client, s, history, plain = history_clip_packs
    segments = {}
    for doc in _clips(client, history):
        record, clip = doc["record"], doc["video"]["cam/rgb"]
        n, first = record["samples"], record["index"][0]
        shows = records.unpack_array(record["frames"]["cam/rgb"])
        lead = 4 if first >= 4 else first  # before a segment's first sample, history repeats it
        assert clip["frames"] == len(clip["packets"]) == n + lead
        assert shows[0].tolist() == [max(lead - k, 0) for k in range(5)]  # now, then 1 … 4 steps back
        # a keyframe at the first frame, then at every 8th sample's: history across a group's
        # edge reads the group before it, in the same clip
        assert clip["keys"] == [0, *range(lead + 8, n + lead, 8)]
        segments.setdefault(record["segment"], []).append((first, n))
    for clips in segments.values():  # 150 samples: clips of 64, 64 and 22
        assert sorted(clips) == [(0, 64), (64, 64), (128, 22)]


def test_the_groups_after_a_clip_s_first_are_the_bytes_a_pack_without_history_stores(history_clip_packs):
    client, s, history, plain = history_clip_packs
    alone = {tuple(bytes(p) for p in doc["video"]["cam/rgb"]["packets"]) for doc in _clips(client, plain)}
    groups = 0
    for doc in _clips(client, history):
        clip = doc["video"]["cam/rgb"]
        keys = [*clip["keys"], len(clip["packets"])]
        for start, end in zip(keys[1:], keys[2:]):
            assert tuple(bytes(p) for p in clip["packets"][start:end]) in alone  # encoded alone, as the pack without history does
            groups += 1
    assert groups == 3 * (7 + 7 + 2)


def test_history_costs_a_few_frames_a_clip_not_a_copy_of_each(history_clip_packs, tmp_path):
    client, s, history, plain = history_clip_packs
    frames = {pack.key: sum(doc["video"]["cam/rgb"]["frames"] for doc in _clips(client, pack))
              for pack in (history, plain)}
    assert frames[history.key] == frames[plain.key] + 3 * 2 * 4  # 4 frames before each clip but a segment's first
    other = rayform.Client(tmp_path / "store")  # the same recordings; the fixture's store stays as it is
    short = other.pack(add_video_slice(other, frames=150, name="long-video"), 30, image_codec="h264", max_history=4,
                       max_horizon=8, clip_frames=8, workers=1, progress=False)  # clips of 8 holding their history
    plain_bytes = plain.schema["cam/rgb"].video.packet_bytes
    ratio = history.schema["cam/rgb"].video.packet_bytes / plain_bytes
    before = short.schema["cam/rgb"].video.packet_bytes / plain_bytes
    # 24 frames more than 450, each a frame after a keyframe (a textured pan at 64x64: 5.5%)
    assert ratio <= 1.06 and before >= 1.25, (ratio, before)


@pytest.mark.parametrize("frame", [0, 3, 4, 11, 12, 13, 40, 67])
def test_any_frame_of_a_long_clip_decodes_from_its_group_s_keyframe(history_clip_packs, frame):
    client, s, history, _ = history_clip_packs
    from rayform.codec.clip import read_clip

    doc = next(d for d in _clips(client, history) if d["video"]["cam/rgb"]["frames"] == 68)
    clip = read_clip(doc["video"]["cam/rgb"], "test")
    decoder = PyAVDecoder()
    whole = decoder.decode(clip, range(clip.frames), None, "whole")
    one = PyAVDecoder()
    got = one.decode(clip, [frame], None, "one")
    assert np.array_equal(got[frame], whole[frame])
    assert one.decoded <= 12  # the frames from its group's keyframe, not the clip's 68
