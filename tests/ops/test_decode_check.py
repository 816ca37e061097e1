"""Damage never silent: a recording damaged before it was stored (its bytes hash to their name,
so verify's hashes pass) is refused where it is decoded, naming the segment, the stream and
the frame, and ``rayform verify --decode`` finds it before training does."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import recorded_video

import rayform
from rayform.codec.video import decoder_context
from rayform.errors import Malformed
from rayform.ops.decode_check import decode_check

pytest.importorskip("av")
CRF = 36


def _damaged() -> rayform.VideoStream:
    """A recorded H.264 stream with one byte of one packet's payload flipped: the first such
    flip (in a fixed order) that changes a frame, as a camera or a disk would damage it. Recorded
    at a CRF high enough that keeping its packets costs fewer bytes than encoding them (so the
    pack keeps them, damage and all)."""
    import av

    stream = recorded_video(24, size=64, crf=CRF)[0]
    for p in range(5, len(stream.packets)):
        for at in range(len(stream.packets[p]) // 2, len(stream.packets[p]), 7):
            packets = [bytearray(pk) for pk in stream.packets]
            packets[p][at] ^= 0xFF
            context = decoder_context("h264", stream.extradata)
            try:
                found = any(f.is_corrupt for pk in [*packets, None]
                            for f in context.decode(av.Packet(bytes(pk)) if pk is not None else None))
            except av.FFmpegError:
                found = True
            if found:
                return rayform.VideoStream(stream.name, stream.timestamps, [bytes(pk) for pk in packets],
                                           stream.packet_times, stream.keyframes, stream.codec, stream.width,
                                           stream.height, stream.extradata)
    raise AssertionError("no damage found to test with")


@pytest.fixture
def damaged(client):
    t = np.asarray(recorded_video(24, size=64, crf=CRF)[0].timestamps)
    joints = rayform.ArrayStream("joints", t, np.zeros((len(t), 2), np.float32))
    bad = client.segments.add("lab", "damaged", [_damaged(), joints])
    good = client.segments.add("lab", "good", [recorded_video(24, size=64, seed=1, crf=CRF)[0], joints])
    return client, client.slices.create([good, bad], name="cams"), bad


def test_a_damaged_recording_is_one_malformed_naming_segment_stream_and_frame(damaged):
    client, s, bad = damaged
    pack = client.pack(s, 30, max_horizon=2, workers=1, progress=False)
    assert pack.schema["cam/rgb"].video.kept  # its packets copied as recorded: the damage with them
    ds = rayform.torch.EpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2) \
        if pytest.importorskip("torch") else None
    with pytest.raises(Malformed, match=rf"segment {bad.id}.*cam/rgb: frame \d+ of its h264 clip"):
        for i in range(len(ds)):
            ds[i]
    with pytest.raises(Malformed, match=rf"{bad.id}@.* stream cam/rgb: frame \d+ (is damaged|does not decode)"):
        for i in range(24):
            client.segments.get(bad.id).frame_array("cam/rgb", i)


def test_verify_decode_finds_it_where_hashes_cannot(damaged, tmp_path):
    client, s, bad = damaged
    pack = client.pack(s, 30, max_horizon=2, workers=1, progress=False)
    report = decode_check(s, [pack])
    assert report.blobs > 2  # two recorded streams, and the pack's clips, each once
    whats = [p.what for p in report.problems]
    assert f"segment {bad.id} stream cam/rgb" in whats and any(w.startswith(f"pack {pack.key}") for w in whats)
    env = {**os.environ, "RAYFORM_STORE": str(client.store.root)}
    run = subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "verify", "cams", "--decode"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "re-hashed: ok" in run.stdout, run.stdout + run.stderr
    assert f"BAD  segment {bad.id} stream cam/rgb" in run.stdout and "damaged" in run.stdout.splitlines()[-1]
    clean = client.slices.create([client.segments.list()[1]], name="clean")
    assert clean.segments[0].id != bad.id and decode_check(clean, []).ok
