"""x264's settings against JPEG q90, on one real camera at one pack rate: bytes, PSNR and decode
time, for the settings a video pack could use.

The G1 camera's frames of ../shared (``--camera``, as ``video.py`` names them), every
``30 / --fps``-th frame (``--frames`` of them), encoded as a pack encodes them (closed groups of
``--clip`` frames, no B-frames, at the pack's nominal rate) with each of: the pack's own
options, x264's ``tune psnr,fastdecode`` (packs before), CABAC and deblocking on (``tune
psnr``), and that at preset slow; each at the
CRFs given, and JPEG q90 as the reference. Printed: bytes over JPEG's, PSNR over JPEG's and the
decode CPU a frame (PyAV, medians of 3). What a lower rate or a harder camera costs, and what
each setting buys at what decode cost.

    python benchmarks/x264_settings.py [--camera g1] [--fps 10] [--crf 18,19,20,21] [--frames 240] [--clip 16]
"""

from __future__ import annotations

import argparse
import io
import time
from statistics import median

import av
import numpy as np
from video import real_frames

from rayform.codec import imagecodec
from rayform.codec.video import psnr
from rayform.codec.video_encoder import NOMINAL_FPS, VideoCodec

SETTINGS = {  # None: the pack's own options (codec.video_encoder)
    "the pack's (chroma -4, deblocking, CAVLC)": None,
    "psnr,fastdecode (packs before)": {"tune": "psnr,fastdecode"},
    "psnr medium (CABAC, deblocking)": {"tune": "psnr"},
    "psnr slow": {"tune": "psnr", "preset": "slow"},
}


def encode(frames: np.ndarray, fps: int, clip: int, options: dict[str, str]) -> list[bytes]:
    clips = []
    for start in range(0, len(frames), clip):
        buf = io.BytesIO()
        with av.open(buf, "w", format="h264") as container:
            stream = container.add_stream("libx264", rate=NOMINAL_FPS)  # as a pack encodes, whatever the rate
            stream.height, stream.width = frames.shape[1:3]
            stream.pix_fmt = "yuv420p"
            stream.options = options
            for f in frames[start:start + clip]:
                for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        clips.append(buf.getvalue())
    return clips


def decode(clips: list[bytes]) -> tuple[float, list[np.ndarray]]:
    """ms of CPU a frame (median of 3), and the frames."""
    times, frames = [], []
    for _ in range(3):
        t0, frames = time.process_time(), []
        for data in clips:
            with av.open(io.BytesIO(data), format="h264") as container:
                frames += [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        times.append((time.process_time() - t0) / len(frames) * 1e3)
    return median(times), frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--camera", default="g1")
    ap.add_argument("--fps", type=int, default=10)
    ap.add_argument("--crf", default="17,18,19,20")
    ap.add_argument("--frames", type=int, default=240)
    ap.add_argument("--clip", type=int, default=16)
    args = ap.parse_args()
    frames = np.ascontiguousarray(real_frames(args.camera)[::max(1, round(30 / args.fps))][:args.frames])
    jpeg = [imagecodec.encode_jpeg(f, 90) for f in frames]
    jpeg_bytes = sum(map(len, jpeg))
    jpeg_psnr = float(np.mean([psnr(f, imagecodec.decode(j, "jpeg")) for f, j in zip(frames, jpeg)]))
    print(f"{args.camera} camera, {len(frames)} frames at {args.fps} fps, clips of {args.clip}: JPEG q90 "
          f"{jpeg_bytes / len(frames):.0f} B a frame, {jpeg_psnr:.2f} dB")
    print(f"{'settings':42} {'crf':>4} {'x JPEG bytes':>13} {'dB vs JPEG':>11} {'decode ms/frame':>16}")
    g = str(args.clip)
    for label, extra in SETTINGS.items():
        for crf in (float(c) for c in args.crf.split(",")):
            if extra is None:
                options = VideoCodec("h264", crf, None, args.clip).options()
            else:
                options = {"preset": "medium", "bf": "0", "g": g, "keyint_min": g, "sc_threshold": "0", **extra,
                           "crf": f"{crf:g}"}
            clips = encode(frames, args.fps, args.clip, options)
            ms, decoded = decode(clips)
            quality = float(np.mean([psnr(a, b) for a, b in zip(frames, decoded)]))
            print(f"{label:42} {crf:4g} {sum(map(len, clips)) / jpeg_bytes:13.3f} {quality - jpeg_psnr:+11.2f} {ms:16.3f}")


if __name__ == "__main__":
    main()
