"""The clip format: every field of an untrusted clip checked before a decoder sees a byte."""

from __future__ import annotations

import pytest

from rayform.codec import records
from rayform.codec.clip import MAX_PACKETS, MAX_SIDE, Clip, read_clip
from rayform.errors import Malformed

CLIP = Clip("h264", 64, 48, 2, (b"\x00\x00\x01key", b"\x00\x00\x01p"), (0,), b"\x01avcC")


def test_a_clip_reads_back_as_written():
    assert read_clip(CLIP.to_bytes(), "clip") == CLIP
    assert read_clip(CLIP.to_doc(), "clip", "h264", (48, 64)) == CLIP
    assert CLIP.nbytes == sum(len(p) for p in CLIP.packets)


@pytest.mark.parametrize("change, says", [
    ({"codec": "mpeg2"}, "codec 'mpeg2' is not one of"),
    ({"codec": "av1"}, "its clip is av1 where the pack says h264"),
    ({"width": MAX_SIDE + 1}, "width"),
    ({"height": 0}, "height"),
    ({"width": 640}, "claim 640x48, the pack's schema 64x48"),
    ({"frames": True}, "frames"),
    ({"frames": 3}, "2 packets for 3 frames"),
    ({"packets": [b"x"] * (MAX_PACKETS + 1), "frames": 2}, "packets are not"),
    ({"packets": ["text", b"x"]}, "packets are not"),
    ({"packets": [b"", b"x"]}, "packets are not"),
    ({"keys": [1]}, "keyframes"),
    ({"keys": [0, 5]}, "keyframes"),
    ({"keys": []}, "keyframes"),
    ({"extradata": "text"}, "extradata"),
    ({"extradata": bytes(1 << 17)}, "extradata"),
])
def test_a_bad_field_is_one_malformed_naming_it(change, says):
    doc = {**CLIP.to_doc(), **change}
    with pytest.raises(Malformed, match=says):
        read_clip(records.dumps(doc), "sample 7's clip", "h264", (48, 64))


def test_bytes_that_are_not_a_clip_are_malformed():
    for data in (b"", b"\xff\xfe", records.dumps([1, 2]), records.dumps("clip")):
        with pytest.raises(Malformed, match="sample 7"):
            read_clip(data, "sample 7")


def test_a_frame_decodes_from_the_last_keyframe_before_it_unless_packets_reorder():
    clip = Clip("h264", 8, 8, 6, (b"a",) * 6, (0, 3))
    assert [clip.start_for(i) for i in range(6)] == [0, 0, 0, 3, 3, 3]
    assert Clip("h264", 8, 8, 6, (b"a",) * 6, (0, 3), reorders=True).start_for(5) == 0
