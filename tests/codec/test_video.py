"""Clips decoded by PyAV: the frames encoded come back (within the codec's error), at the size
asked, and a bad clip is one Malformed naming it, never FFmpeg's own exception."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import moving_texture

from rayform.codec import imagecodec
from rayform.codec.clip import read_clip
from rayform.codec.video import PyAVDecoder, psnr
from rayform.codec.video_encoder import VideoCodec, encoders
from rayform.errors import Malformed

FRAMES = moving_texture(8, 64)


@pytest.mark.parametrize("codec", ["h264", "av1", "hevc"])
def test_every_frame_of_a_clip_comes_back(codec):
    if codec not in encoders():
        pytest.skip(f"this FFmpeg has no {codec} encoder")
    clip = read_clip(VideoCodec(codec).encode(FRAMES).to_bytes(), "clip", codec, (64, 64))
    decoder = PyAVDecoder()
    got = decoder.decode(clip, range(8), None, "clip")
    assert sorted(got) == list(range(8)) and decoder.decoded == 8
    jpeg = np.stack([imagecodec.decode(imagecodec.encode(f, "jpeg", 90), "jpeg") for f in FRAMES])
    assert psnr(np.stack([got[i] for i in range(8)]), FRAMES) > psnr(jpeg, FRAMES) - 2.5  # small busy frames
    assert all(psnr(got[i], FRAMES[i]) > psnr(got[i], FRAMES[i - 1]) + 3 for i in range(1, 8))  # each its own


def test_a_frame_asked_alone_decodes_from_its_keyframe_and_only_that_far():
    clip = VideoCodec("h264", clip_frames=8).encode(FRAMES)
    decoder = PyAVDecoder()
    alone = decoder.decode(clip, [5], None, "clip")[5]
    assert decoder.decoded == 6  # frames 0..5: the keyframe and the P-frames up to it
    assert np.array_equal(alone, PyAVDecoder().decode(clip, range(8), None, "clip")[5])


def test_frames_decode_at_the_size_asked():
    clip = VideoCodec("h264").encode(FRAMES)
    got = PyAVDecoder().decode(clip, [0, 7], (32, 48), "clip")
    assert got[0].shape == (32, 48, 3) and got[7].dtype == np.uint8


def test_garbage_packets_are_one_malformed_naming_the_clip():
    clip = VideoCodec("h264").encode(FRAMES)
    rng = np.random.default_rng(1)
    for bad in (dataclasses.replace(clip, packets=(rng.bytes(300),) * clip.frames),
                dataclasses.replace(clip, packets=clip.packets[:3])):  # fewer frames than it says
        with pytest.raises(Malformed, match="sample 3"):
            PyAVDecoder().decode(bad, range(bad.frames), None, "sample 3")
    with pytest.raises(Malformed, match="frame 9 of a clip of 8"):
        PyAVDecoder().decode(clip, [9], None, "sample 3")


def test_a_frame_of_another_size_than_the_clip_says_is_refused():
    small = VideoCodec("h264").encode(moving_texture(2, 32))
    lying = dataclasses.replace(small, width=64, height=64)
    with pytest.raises(Malformed, match="decoded 32x32, the clip says 64x64"):
        PyAVDecoder().decode(lying, [0], None, "sample 1")


def test_psnr_is_exact_on_stacks_larger_than_one_piece():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (40, 224, 224, 3), np.uint8)  # 6M values: more than one piece of the sum
    b = np.clip(a.astype(np.int16) + rng.integers(-9, 10, a.shape), 0, 255).astype(np.uint8)
    want = 10 * np.log10(255.0**2 / np.mean((a.astype(np.float64) - b) ** 2))
    assert psnr(a, b) == pytest.approx(want, abs=1e-9)
    assert psnr(np.zeros_like(a), np.full_like(a, 255)) == 0.0  # the largest error, summed without overflow
    assert psnr(a, a) == float("inf")
    with pytest.raises(ValueError, match="different shapes"):
        psnr(a, b[:3])


def test_a_decoder_used_before_a_fork_decodes_in_the_forked_process():
    """A DataLoader forks its workers from a process that may have decoded already (a user's
    look at ds[0]); FFmpeg's converter made before the fork would wait for ever in the child."""
    import os
    import time

    clip = VideoCodec("h264").encode(FRAMES)
    decoder = PyAVDecoder()
    want = decoder.decode(clip, [7], None, "clip")[7]
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only with the same frame
        try:
            os._exit(0 if np.array_equal(decoder.decode(clip, [7], None, "clip")[7], want) else 1)
        except BaseException:
            os._exit(2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked process never finished decoding")


HOSTILE_SPS = r"""
import dataclasses, sys
import msgpack
from rayform.codec.clip import Clip
from rayform.codec.video import PyAVDecoder
from rayform.errors import Malformed
doc = msgpack.unpackb(open(sys.argv[2], "rb").read())
big = Clip("h264", 4096, 4096, len(doc["packets"]), tuple(doc["packets"]), tuple(doc["keys"]), doc["extradata"])
claimed = dataclasses.replace(big, width=64, height=64) if sys.argv[1] == "lies" else big
def peak():  # the process's peak resident set, in KiB
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
open("/proc/self/clear_refs", "w").write("5")  # the peak starts again from here (Linux)
before = peak()
try:
    PyAVDecoder().decode(claimed, range(big.frames), (64, 64), "clip")
    print("decoded", end=" ")
except Malformed as e:
    print("refused", end=" ")
print((peak() - before) // 1024)
"""


def test_a_clip_whose_bitstream_claims_a_larger_size_is_refused_before_its_frames_are_allocated(tmp_path):
    """The clip's record says 64x64 and the pack was checked for that; its SPS says 4096x4096.
    FFmpeg is told the size (``max_pixels``) and refuses the frames before allocating them."""
    import subprocess
    import sys

    import msgpack

    tile = np.random.default_rng(0).integers(0, 255, (4, 16, 16, 3), np.uint8)
    big = VideoCodec("h264", None, "ultrafast", clip_frames=4).encode(np.tile(tile, (1, 256, 256, 1)))
    (tmp_path / "clip").write_bytes(msgpack.packb({"packets": list(big.packets), "keys": list(big.keys),
                                                   "extradata": big.extradata}))
    runs = {mode: subprocess.run([sys.executable, "-c", HOSTILE_SPS, mode, str(tmp_path / "clip")], capture_output=True,
                                 text=True, timeout=300).stdout.split() for mode in ("lies", "honest")}
    assert runs["lies"][0] == "refused" and runs["honest"][0] == "decoded", runs
    grown = {mode: int(out[1]) for mode, out in runs.items()}  # MiB the decoding added to the process's peak
    assert grown["lies"] < 64 < grown["honest"], grown
