"""DecodedClips: a long clip's frames decoded a group at a time and let go once no sample
still to come shows them; a batch holding a sample twice; a record naming absurd frames."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import moving_texture

from rayform.codec.video import PyAVDecoder
from rayform.codec.video_encoder import VideoCodec
from rayform.errors import Malformed
from rayform.pack.layout import StreamSchema, VideoSchema
from rayform.sample.clip_frames import DecodedClips, clip_item

LEAD, SAMPLES, GOP = 4, 64, 8


@pytest.fixture(scope="module")
def long_clip():
    frames = moving_texture(LEAD + SAMPLES, 32, seed=3)
    clip = VideoCodec("h264", clip_frames=GOP).encode(frames, [0, *range(LEAD + GOP, LEAD + SAMPLES, GOP)])
    # per sample: its frame now, then 1..4 steps back (as a pack's record says)
    table = np.stack([LEAD + np.arange(SAMPLES) - k for k in range(LEAD + 1)], axis=1)
    schema = StreamSchema("cam/rgb", "image", "cam.rgb.clip", "|u1", (32, 32, 3),
                          video=VideoSchema("h264", SAMPLES, False, 17, "medium", gop=GOP + LEAD))
    whole = PyAVDecoder().decode(clip, range(clip.frames), None, "reference")
    return clip.to_doc(), table, schema, whole


def _build(clips: DecodedClips, long_clip, samples: list[int], back=(0, 2, 4)) -> np.ndarray:
    doc, table, schema, _ = long_clip
    rows = np.zeros((len(samples), len(back), 32, 32, 3), np.uint8)
    clips.fill(schema, [clip_item("clip", doc, SAMPLES, table, j, back, rows[i], "test") for i, j in enumerate(samples)],
               None, whole=True)
    return rows


def test_a_clip_read_in_time_order_is_decoded_once_a_group_or_two_held(long_clip):
    doc, table, schema, whole = long_clip
    clips = DecodedClips()
    held = []
    for j in range(SAMPLES):
        rows = _build(clips, long_clip, [j])
        for i, k in enumerate((0, 2, 4)):
            assert np.array_equal(rows[0, i], whole[table[j, k]])
        held.append(clips._bytes // (32 * 32 * 3))
    assert clips.decoded == LEAD + SAMPLES  # every frame once
    assert max(held) <= GOP + LEAD + 1 and held[-1] == 0  # not the clip's 68; none once it is done


def test_a_sample_twice_in_one_batch_gets_its_frames_both_times(long_clip):
    doc, table, schema, whole = long_clip
    clips = DecodedClips()
    last = SAMPLES - 1  # its frame now is shown by no other sample: let go once it is built
    rows = _build(clips, long_clip, [last, last, last - 1])
    assert np.array_equal(rows[0], rows[1]) and np.array_equal(rows[0, 0], whole[table[last, 0]])
    again = _build(clips, long_clip, [last])  # and once more, in a later batch: decoded again
    assert np.array_equal(again[0], rows[0])


def test_any_order_gives_the_same_frames(long_clip):
    doc, table, schema, whole = long_clip
    clips = DecodedClips()
    order = np.random.default_rng(1).permutation(SAMPLES).tolist()
    for start in range(0, SAMPLES, 5):
        batch = order[start:start + 5]
        rows = _build(clips, long_clip, batch)
        for i, j in enumerate(batch):
            assert np.array_equal(rows[i, 2], whole[table[j, 4]])


@pytest.mark.parametrize("frame", [LEAD + SAMPLES, 1 << 40])
def test_a_record_naming_a_frame_beyond_the_clip_is_malformed(long_clip, frame):
    doc, table, schema, _ = long_clip
    bad = table.copy()
    bad[7, 2] = frame
    with pytest.raises(Malformed, match="frame"):
        _build(DecodedClips(), (doc, bad, schema, None), [7])
