"""How a pack encodes a camera: closed groups of pictures, no B-frames, settings checked."""

from __future__ import annotations

import pytest
from conftest import moving_texture

from rayform.codec.video_encoder import CRF, VideoCodec
from rayform.errors import InvalidInput


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_a_clip_is_one_keyframe_then_frames_in_order(codec):
    clip = VideoCodec(codec, clip_frames=6).encode(moving_texture(6, 64), 30)
    assert clip.frames == len(clip.packets) == 6 and clip.keys == (0,) and not clip.reorders
    longer = VideoCodec(codec, clip_frames=4).encode(moving_texture(9, 64), 30)
    assert longer.keys[0] == 0 and set(longer.keys) <= {0, 4, 8}  # a keyframe every clip_frames at most


def test_defaults_and_checks():
    assert VideoCodec().crf == CRF["h264"] and VideoCodec("av1").preset == "8"
    for bad in (dict(codec="mpeg4"), dict(crf=64), dict(crf=True), dict(clip_frames=0), dict(preset="")):
        with pytest.raises(InvalidInput):
            VideoCodec(**bad)


def test_frames_of_an_odd_size_ask_for_a_resize():
    with pytest.raises(InvalidInput, match="even width and height.*resize"):
        VideoCodec().encode(moving_texture(2, 64)[:, :63], 30)
