"""How a pack encodes a camera: closed groups of pictures, no B-frames, settings checked."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import moving_texture

from rayform.codec.video_encoder import CRF, VideoCodec, encoders
from rayform.errors import InvalidInput


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_a_clip_is_one_keyframe_then_frames_in_order(codec):
    clip = VideoCodec(codec, clip_frames=6).encode(moving_texture(6, 64))
    assert clip.frames == len(clip.packets) == 6 and clip.keys == (0,) and not clip.reorders
    longer = VideoCodec(codec, clip_frames=4).encode(moving_texture(9, 64))
    assert longer.keys[0] == 0 and set(longer.keys) <= {0, 4, 8}  # a keyframe every clip_frames at most


def test_defaults_and_checks():
    assert VideoCodec().crf == CRF["h264"] and VideoCodec("av1").preset == "8"
    for bad in (dict(codec="mpeg4"), dict(crf=64), dict(crf=True), dict(clip_frames=0), dict(preset="")):
        with pytest.raises(InvalidInput):
            VideoCodec(**bad)


def test_frames_of_an_odd_size_ask_for_a_resize():
    with pytest.raises(InvalidInput, match="even width and height.*resize"):
        VideoCodec().encode(moving_texture(2, 64)[:, :63])


@pytest.mark.parametrize("codec", ["h264", "av1", "hevc"])
def test_encoding_leaves_the_thread_s_scheduling_as_it_was(codec):
    """SVT-AV1 as root makes the thread opening an encoder real-time (FIFO 99) and leaves it
    so: a pack would starve everything else on its core."""
    if codec not in encoders():
        pytest.skip(f"this FFmpeg cannot encode {codec}")
    if not hasattr(os, "sched_getscheduler"):
        pytest.skip("no scheduling policies here")
    code = ("import os, numpy as np; from rayform.codec.video_encoder import VideoCodec; "
            "os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)); "
            "before = os.sched_getscheduler(0), os.sched_getparam(0); "
            f"VideoCodec({codec!r}, clip_frames=4).encode(np.zeros((8, 64, 64, 3), np.uint8)); "
            "print(before == (os.sched_getscheduler(0), os.sched_getparam(0)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["True"], run.stderr  # a fresh process, as an ordinary one: nothing inherited hides it


_ENCODE = """
import hashlib, sys
import numpy as np
from rayform.codec.video_encoder import VideoCodec
frames = np.load(sys.argv[1])
for _ in range(3):
    print(hashlib.sha256(b"".join(VideoCodec(sys.argv[2]).encode(frames).packets)).hexdigest())
"""


@pytest.mark.parametrize("codec", ["h264", "av1", "hevc"])
def test_the_same_frames_give_the_same_bytes_whatever_the_heap_held(tmp_path, codec):
    """x264's AVX-512 routines read memory it never wrote: glibc's malloc filling fresh memory
    with another byte (MALLOC_PERTURB_) changed its packets. Each process encodes three times."""
    if codec not in encoders():
        pytest.skip(f"this FFmpeg cannot encode {codec}")
    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, (80, 80, 3), dtype=np.uint8)  # detail everywhere, moving
    frames = np.stack([np.roll(np.kron(coarse, np.ones((3, 3, 1), np.uint8))[:224, :224], 3 * k, axis=1)
                       for k in range(8)])
    np.save(tmp_path / "frames.npy", frames)
    digests = set()
    for byte in (0, 1, 2, 77):
        run = subprocess.run([sys.executable, "-c", _ENCODE, str(tmp_path / "frames.npy"), codec],
                             env={**os.environ, "MALLOC_PERTURB_": str(byte)}, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        digests |= set(run.stdout.split())
    assert len(digests) == 1
