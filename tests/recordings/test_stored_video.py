"""A recorded video kept as a segment's stream: packets stored bit for bit, frames decoded on
their own or in order, and what a writer or a manifest says checked."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import recorded_video

import rayform
from rayform.errors import InvalidInput

NS = 1_000_000_000 // 30


def recorded(frames: int = 12, lead: int = 0) -> tuple[rayform.VideoStream, list[np.ndarray]]:
    return recorded_video(frames, lead)


def test_packets_are_kept_as_recorded_and_frames_decode_in_any_order(client):
    stream, frames = recorded()
    ref = client.segments.add("lab", "ep", [stream])
    seg = client.segments.get(ref.id, ref.version)
    info = seg.streams["cam/rgb"]
    assert info.is_video and info.count == 12 and info.shape == (64, 64, 3) and info.video.codec == "h264"
    assert [bytes(seg.frame_view("cam/rgb", p)) for p in range(12)] == [bytes(p) for p in stream.packets]
    video = seg.video("cam/rgb")
    assert video.keyframe_gap() == 4 and [video.start_packet(i) for i in (0, 3, 4, 11)] == [0, 0, 4, 8]
    for i in (7, 2, 3, 11, 0, 5, 6):  # out of order, then in order: the same frames
        assert np.array_equal(seg.frame_array("cam/rgb", i), frames[i])
    clip, start = video.clip(5, 9)  # from the keyframe before frame 5
    assert start == 4 and clip.frames == 6 and clip.keys == (0, 4)


def test_a_lead_in_before_the_first_frame_only_decodes(client):
    stream, frames = recorded(lead=2)
    ref = client.segments.add("lab", "ep", [stream])
    seg = client.segments.get(ref.id, ref.version)
    assert seg.streams["cam/rgb"].count == 10 and seg.video("cam/rgb").video.packets == 12
    assert np.array_equal(seg.frame_array("cam/rgb", 0), frames[0])
    assert np.array_equal(seg.frame_array("cam/rgb", 9), frames[9])


@pytest.mark.parametrize("change, says", [
    (dict(codec="mpeg2"), "video codec 'mpeg2'"),
    (dict(keyframes=np.zeros(12, bool)), "first packet is not a keyframe"),
    (dict(packet_times=np.arange(11)), "12 packets, 11 packet times"),
    (dict(timestamps=np.arange(12, dtype=np.int64) * NS + 1), "each frame is one packet's time"),
    (dict(width=0), "video width 0"),
    (dict(packets=[b""] * 12), "a packet is empty"),
])
def test_a_stream_that_does_not_hold_together_is_refused_and_nothing_is_stored(client, change, says):
    import dataclasses

    stream, _ = recorded()
    with pytest.raises(InvalidInput, match=says):
        client.segments.add("lab", "ep", [dataclasses.replace(stream, **change)])
    assert client.segments.list() == []
