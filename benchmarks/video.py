"""Video benchmark: a video pack beside the JPEG pack of the same slice, in one run.

The slice: real robot camera frames (every frame of the LeRobot examples' videos in
../shared/data/real, decoded and resized to 224x224, cut into episodes of 4 s at 30 fps; the
v3.0 example's joint states beside them), stored raw, so that both packs encode the very same
pixels and their PSNR is measured against them. It is packed at 30 fps as JPEG q90 and with
``--codec h264`` (or ``--codec``), then:

- bytes: each pack, and the LeRobot v3.0 example ingested (video kept as recorded) and packed
  with ``--codec keep``, against its source video file;
- quality: PSNR of every frame of each pack against the frames packed;
- streaming from a loopback S3 (moto): the first epoch's bytes fetched into the cache, then
  cached epochs to the ``STEADY``-th (every reading form's rate and CPU are its last epoch's),
  then a first epoch again (new workers) over the cached shards, to tell what S3 costs from
  what a first epoch's workers do once; its CPU per sample (every process: the DataLoader's
  main one and its workers, as ``time`` counts it), distinct episodes per batch of 64 against uniform sampling, the largest
  worker's peak RSS and the time to the first batch, medians of ``--repeats``;
- ``EpisodeDataset``, shuffled: CPU per sample, time to the first batch, and the frames decoded
  per sample (measured in one process over a few batches).

    python benchmarks/video.py [--workers 2] [--repeats 3] [--copies 4] [--codec h264] [--clip-frames 8]
    python benchmarks/video.py --camera g1 --quality-only     # a second real camera: bytes and PSNR
    python benchmarks/video.py --quality-only --rates 10,15,30  # bytes and PSNR at each pack rate
    python benchmarks/video.py --quality-only --rates 10,15,30 --camera g1 --clip-frames 16 --preset slower
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import glob
import os
import re
import sys
import tempfile
from pathlib import Path
from statistics import median

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loader as bench
from streaming import cpu_seconds as process_cpu
from streaming import start_moto

import rayform
from rayform.codec.codecs import VIDEO_CODECS
from rayform.codec.video import psnr
from rayform.diagnostics.batch_mixing import mixing
from rayform.ops.references import pack_data
from rayform.pack.spec import CLIP_FRAMES
from rayform.store.store import Store

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
V30 = REAL / "lerobot_v30_so101_ros2_example"
FPS, SIZE, EPISODE = 30, (224, 224), 120
OBS = ["cam/rgb", "joints"]
# Epochs a loader runs, the last one measured as its steady state (every form alike: the stream's
# first is fetched from S3). A second epoch was still warming some forms' workers up (the clip
# sampler read at 0.83x streaming's rate in its second epoch, 0.97x in its third).
STEADY = 3


CAMERAS = {"all": "lerobot_*", "so101": "lerobot_v30_*", "g1": "lerobot_v21_unitree_g1*"}  # --camera: whose frames


def real_frames(camera: str = "all") -> np.ndarray:
    """Every frame of the LeRobot examples' videos (``camera``: one robot's), resized to SIZE
    (Pillow bilinear)."""
    import av

    from rayform.codec import imagecodec

    frames = []
    for path in sorted(glob.glob(str(REAL / CAMERAS[camera] / "videos" / "**" / "*.mp4"), recursive=True)):
        with av.open(path) as container:
            for frame in container.decode(video=0):
                frames.append(imagecodec.resize(frame.to_ndarray(format="rgb24"), SIZE))
    return np.stack(frames)


def build_slice(client: rayform.Client, copies: int, camera: str = "all") -> tuple[rayform.Slice, np.ndarray]:
    import pyarrow.parquet as pq

    frames = real_frames(camera)
    state = np.asarray(pq.read_table(V30 / "data" / "chunk-000" / "file-000.parquet").column("observation.state")
                       .to_pylist(), np.float32)
    refs = []
    for copy in range(copies):  # the frames again, as more episodes: a longer epoch
        for e, first in enumerate(range(0, len(frames) - EPISODE + 1, EPISODE)):
            t = np.arange(EPISODE, dtype=np.int64) * round(1e9 / FPS)
            joints = state[(first + np.arange(EPISODE)) % len(state)]
            refs.append(client.segments.add(site="lab", name=f"real-{copy}-{e:03d}", streams=[
                rayform.ImageStream("cam/rgb", t, frames[first:first + EPISODE]),
                rayform.ArrayStream("joints", t, joints)]))
    return client.slices.create(refs, name=f"real224x{copies}"), frames


def pack_psnr(slice_: rayform.Slice, key: str, frames: np.ndarray, fps: int = FPS) -> float:
    """PSNR of every frame of a pack at ``fps`` (a divisor of the frames' 30) against the frames
    it packed (episode e's step k is frame (e mod episodes per copy) * EPISODE + k * 30 / fps)."""
    from torch.utils.data import DataLoader

    per_copy, every = len(frames) // EPISODE, FPS // fps
    ds = rayform.torch.EpisodeDataset(slice_, obs=["cam/rgb"], fps=fps, pack=key)
    got, want = [], []
    for batch in DataLoader(ds, batch_sampler=rayform.torch.ClipBatchSampler(ds, 64)):  # every sample, clips once
        got.append(batch["cam/rgb"].numpy().transpose(0, 2, 3, 1))
        want.append((batch["meta"]["episode_index"].numpy() % per_copy) * EPISODE
                    + batch["meta"]["frame_index"].numpy() * every)
    return psnr(np.concatenate(got), frames[np.concatenate(want)])


def print_rates(client: rayform.Client, slice_: rayform.Slice, frames: np.ndarray, args: argparse.Namespace,
                rates: list[int]) -> None:
    """A row per pack rate: JPEG q90's and the video codec's bytes a frame and PSNR against the
    frames packed (the video at its default quality, encoded at one nominal rate whatever the
    pack's: its bits a frame should not grow as the rate falls)."""
    print(f"{args.camera} camera, {args.codec} against JPEG q90, by pack rate:")
    print(f"{'fps':>4} {'JPEG KiB/frame':>15} {'video KiB/frame':>16} {'video/JPEG':>11} {'JPEG dB':>8} "
          f"{'video dB':>9} {'crf':>4}  target: <= 0.15, within 1.5 dB")
    for fps in rates:
        j = client.pack(slice_, fps, image_codec="jpeg", jpeg_quality=90, progress=False)
        v = client.pack(slice_, fps, image_codec=args.codec, clip_frames=args.clip_frames, video_preset=args.preset,
                        progress=False)
        jb, vb = (sum(sh.bytes for sh in p.shards) / p.samples / 1024 for p in (j, v))
        jq, vq = pack_psnr(slice_, j.key, frames, fps), pack_psnr(slice_, v.key, frames, fps)
        print(f"{fps:>4} {jb:>15.2f} {vb:>16.2f} {vb / jb:>11.3f} {jq:>8.2f} {vq:>9.2f} "
              f"{v.schema['cam/rgb'].video.crf:>4}")


def cache_bytes(directory: str) -> int:
    return sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())


REQUEST = re.compile(r'"(?:\x1b\[[0-9;]*m)*(?:GET|HEAD) /bench')  # werkzeug colours a 206's line


def requests_logged(log: str) -> int:
    """The requests to the bucket moto has logged so far (reads, listings, heads: a line each)."""
    with open(log) as f:
        return sum(bool(REQUEST.search(line)) for line in f)


def stream(slice_id: str, key: str, options: dict, workers: int, repeats: int, episodes: int, log: str) -> dict:
    """First epoch from S3 (its rate, and the reads it made: ``log``, moto's request log), cached
    ones to the steady state, and a first epoch of new workers over the cached shards,
    ``repeats`` times (a new cache each): medians."""
    from torch.utils.data import DataLoader

    out: dict[str, list[float]] = {k: [] for k in ("fetched", "cpu", "rate", "first", "cached_first", "mix", "peak",
                                                   "first_rate", "requests", "samples", "first_cached_rate")}
    def streaming(remote: rayform.Client) -> tuple:  # the dataset, and a DataLoader of new workers over it
        ds = rayform.torch.StreamingEpisodeDataset(remote.slices.get(slice_id), obs=OBS, action="joints_delta",
                                                   fps=FPS, horizon=16, batch_size=64, pack=key)
        return ds, DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)

    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            remote = rayform.Client("s3://bench/store", storage_options=options, cache=cache)
            ds, loader = streaming(remote)
            seen: list = []
            before = requests_logged(log)
            res = bench.run_loader(loader, 1, ds.set_epoch, seen)
            out["requests"].append(requests_logged(log) - before)
            out["samples"].append(res[0][2])
            out["fetched"].append(cache_bytes(cache))
            out["first"].append(res[0][0])
            out["first_rate"].append(res[0][1])
            seen = []
            res = bench.run_loader(loader, STEADY - 1, lambda e, ds=ds: ds.set_epoch(e + 1), seen)  # cached, to steady
            out["cpu"].append(res[-1][3])
            out["rate"].append(res[-1][1])
            out["cached_first"].append(res[0][0])
            out["mix"].append(mixing(seen[-1], episodes).ratio)
            out["peak"].append(bench.live_worker_peak_mib(exclude=MOTO_PID))
            del loader
            gc.collect()  # its workers shut down now, untimed: left to the next one's collection they stalled it 0.23 s
            # the same first epoch, its shards now in the cache: what S3 itself costs a first epoch
            ds, loader = streaming(remote)
            out["first_cached_rate"].append(bench.run_loader(loader, 1, ds.set_epoch)[0][1])
            del loader
            gc.collect()
    return {k: median(v) for k, v in out.items()}


def history_packs(client: rayform.Client, slice_: rayform.Slice, codec: str, history: int) -> dict:
    """The video packed with ``history``: as packs make it (long clips, a keyframe every 8) and
    in clips of 8 each holding its history (as packs were)."""
    return {f"clips of 64, history {history}": client.pack(slice_, FPS, image_codec=codec, max_history=history,
                                                          progress=False),
            f"clips of 8, history {history}": client.pack(slice_, FPS, image_codec=codec, max_history=history,
                                                         clip_frames=CLIP_FRAMES, progress=False)}


def print_history(video: rayform.Pack, packs: dict, history: int) -> None:
    plain = video.schema["cam/rgb"].video.packet_bytes
    for name, p in packs.items():
        got = p.schema["cam/rgb"].video.packet_bytes
        print(f"with --history {history}, {name}: video {got / 2**20:.2f} MiB = {got / plain:.3f}x the pack without "
              f"history (target <= 1.05); whole pack {sum(sh.bytes for sh in p.shards) / 2**20:.2f} MiB")


def stream_local(slice_: rayform.Slice, key: str, workers: int, repeats: int, history: int) -> dict:
    """The streaming dataset over the local store, each sample with ``history`` frames before
    its own: a cached epoch's samples/s and CPU a sample, medians of ``repeats``."""
    from torch.utils.data import DataLoader

    cpu, rate = [], []
    for _ in range(repeats):
        ds = rayform.torch.StreamingEpisodeDataset(slice_, obs=OBS, action="joints_delta", fps=FPS, horizon=16,
                                                   batch_size=64, pack=key, history={"cam/rgb": history + 1})
        loader = DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)
        res = bench.run_loader(loader, STEADY, ds.set_epoch)
        cpu.append(res[-1][3])
        rate.append(res[-1][1])
        del loader
        gc.collect()  # its workers shut down now, untimed
    return {"cpu": median(cpu), "rate": median(rate)}


def episode_dataset(slice_: rayform.Slice, key: str, workers: int, repeats: int, ordered: bool = False,
                    history: int = 0, sampler: bool = False) -> dict:
    """``DataLoader(shuffle=True)`` over it, or (``ordered``) the dataset given the batch size
    and the DataLoader in order: its clip-aware order, or (``sampler``) that order as the
    DataLoader's ``batch_sampler=ClipBatchSampler(...)``. ``history``: each sample also carries
    that many frames before its own."""
    from torch.utils.data import DataLoader

    size: dict = {"batch_size": 64} if ordered and not sampler else {}
    if history:
        size["history"] = {"cam/rgb": history + 1}

    def loader_of(ds: rayform.torch.EpisodeDataset, processes: int) -> DataLoader:
        if sampler:
            return DataLoader(ds, batch_sampler=rayform.torch.ClipBatchSampler(ds, 64, num_workers=processes),
                              num_workers=processes, persistent_workers=processes > 0)
        return DataLoader(ds, batch_size=64, shuffle=not ordered, num_workers=processes, persistent_workers=processes > 0)

    cpu, first, rate, epoch_1, mixes = [], [], [], [], []
    for _ in range(repeats):
        ds = rayform.torch.EpisodeDataset(slice_, obs=OBS, action="joints_delta", fps=FPS, horizon=16, pack=key, **size)
        loader = loader_of(ds, workers)
        seen: list = []
        res = bench.run_loader(loader, STEADY, ds.set_epoch, seen)  # a fresh epoch (workers starting), then the steady state
        epoch_1.append(res[0][3])
        cpu.append(res[-1][3])
        rate.append(res[-1][1])
        first.append(res[0][0])
        mixes.append(mixing(seen[-1], len(slice_.segments)).ratio)
        del loader
        gc.collect()  # its workers shut down now, untimed
    ds = rayform.torch.EpisodeDataset(slice_, obs=OBS, action="joints_delta", fps=FPS, horizon=16, pack=key, **size)
    for _batch in loader_of(ds, 0):  # in this process: its counters
        if ds.builders[0].clips.built >= 1024 and not ordered:  # ordered: a whole epoch (its clips span 16 batches)
            break
    clips = ds.builders[0].clips
    return {"cpu": median(cpu), "first": median(first), "rate": median(rate), "first_epoch_cpu": median(epoch_1),
            "decoded": clips.decoded / clips.built if clips.built else 0.0, "mix": median(mixes)}


def pyav_reference(frames: np.ndarray, video) -> tuple[float, float]:
    """PyAV's own decode of the same kind of packets, the reference a video pack's reading is
    measured against: the frames encoded as the pack encodes them (its codec and CRF, a group
    of pictures a clip), decoded in order to RGB, one thread: (frames/s, CPU ms a frame)."""
    import time

    import av

    from rayform.codec.codecs import VIDEO
    from rayform.codec.video_encoder import VideoCodec

    n = len(frames) - len(frames) % video.clip_frames
    codec = VideoCodec(video.codec, video.crf, video.preset, video.clip_frames)
    clips = [codec.encode(frames[i:i + video.clip_frames]) for i in range(0, n, video.clip_frames)]
    decoder = next(d for d in VIDEO[video.codec].decoders if d in av.codecs_available)
    from av.video.reformatter import VideoReformatter

    packets = [av.Packet(bytes(p)) for clip in clips for p in clip.packets]  # closed groups: one stream
    c0, t0, decoded = process_cpu(os.getpid()), time.perf_counter(), 0
    rgb = VideoReformatter()  # one colour converter kept (a frame's own to_ndarray makes one a frame)
    ctx = av.CodecContext.create(decoder, "r")
    ctx.thread_count = 1
    if clips[0].extradata:
        ctx.extradata = clips[0].extradata
    for packet in [*packets, None]:
        for frame in ctx.decode(packet):
            rgb.reformat(frame, format="rgb24").to_ndarray()
            decoded += 1
    seconds, cpu = time.perf_counter() - t0, process_cpu(os.getpid()) - c0
    return decoded / seconds, 1000 * cpu / decoded


MOTO_PID = None


def main() -> None:
    global MOTO_PID
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copies", type=int, default=4, help="the real frames this many times over, as more episodes")
    ap.add_argument("--codec", default="h264", choices=VIDEO_CODECS)
    ap.add_argument("--clip-frames", type=int, default=0,
                    help="samples a clip (its keyframe interval; 0: the pack's choice): fewer, cheaper random "
                         "access, more bytes")
    ap.add_argument("--preset", help="the video encoder's speed (default: the pack's): slower, fewer bytes")
    ap.add_argument("--store", help="a store to build in (default: a temporary one)")
    ap.add_argument("--camera", default="all", choices=sorted(CAMERAS),
                    help="whose frames: both LeRobot examples' (default), the SO-101 wrist's or the G1 humanoid's")
    ap.add_argument("--quality-only", action="store_true", help="bytes and PSNR only (no loaders)")
    ap.add_argument("--rates", default="30", help="with --quality-only: the pack rates (divisors of 30) whose "
                    "bytes and PSNR against JPEG q90's are each a row, e.g. 10,15,30")
    ap.add_argument("--history", type=int, default=4,
                    help="also pack the video with this history (0: not): its bytes against the pack without")
    args = ap.parse_args()

    import boto3
    import fsspec
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.store or os.path.join(tmp, "store")
        client = rayform.Client(root)
        print("building the slice of real frames ...", file=sys.stderr, flush=True)
        slice_, frames = build_slice(client, args.copies, args.camera)
        jpeg = client.pack(slice_, FPS, image_codec="jpeg", jpeg_quality=90, progress=False)
        video = client.pack(slice_, FPS, image_codec=args.codec, clip_frames=args.clip_frames,
                            video_preset=args.preset, progress=False)
        packs = {"JPEG q90": jpeg, f"{args.codec} ({video.schema['cam/rgb'].video.crf}, clips "
                 f"{video.schema['cam/rgb'].video.clip_frames})": video}

        with_history = history_packs(client, slice_, args.codec, args.history) if args.history else {}
        if args.quality_only:
            print_rates(client, slice_, frames, args, [int(r) for r in args.rates.split(",")])
            print_history(video, with_history, args.history)
            v = video.schema["cam/rgb"].video
            for name, p in packs.items():
                got = pack_psnr(slice_, p.key, frames)
                print(f"{args.camera} camera, {name:28} {sum(sh.bytes for sh in p.shards) / 2**20:8.2f} MiB "
                      f"PSNR {got:6.2f} dB")
            print(f"video / JPEG bytes {sum(sh.bytes for sh in video.shards) / sum(sh.bytes for sh in jpeg.shards):.3f}"
                  f"; the pack's own measure: {v.psnr} dB (JPEG q90 {v.jpeg_psnr} dB) at crf {v.crf}")
            return
        source = next(V30.glob("videos/**/*.mp4"))

        lerobot = client.ingest("lerobot", [V30], "so101", slice_name="lerobot-v30", progress=False).slice
        kept = client.pack(lerobot, 30, progress=False)

        quality = {name: pack_psnr(slice_, p.key, frames) for name, p in packs.items()}
        sizes = {name: sum(sh.bytes for sh in p.shards) for name, p in packs.items()}
        shape = frames.shape
        reference = pyav_reference(frames[:2400], video.schema["cam/rgb"].video)  # before the loaders start
        del frames  # a forked DataLoader worker would start with them in its resident set
        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)

        moto_log = os.path.join(tempfile.mkdtemp(), "moto.log")
        moto, endpoint = start_moto(moto_log)
        MOTO_PID = moto.pid
        try:
            options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                         aws_secret_access_key="bench").create_bucket(Bucket="bench")
            fs = fsspec.filesystem("s3", **options)
            keys = [f"refs/slices/{slice_.id}.json"] + [f"refs/packs/{slice_.id}/{p.key}.json" for p in packs.values()]
            keys += [Store.blob_key(d) for d in [slice_.digest, *(b for p in packs.values() for b in [p.digest, *pack_data(p)])]]
            for key in sorted(set(keys)):
                path = Path(root) / key
                if path.exists():
                    fs.put_file(str(path), f"bench/store/{key}")
            episodes = len(slice_.segments)
            streamed = {name: stream(slice_.id, p.key, options, args.workers, args.repeats, episodes, moto_log)
                        for name, p in packs.items()}
            server_cpu = process_cpu(moto.pid)
        finally:
            moto.kill()
        if with_history:
            history_rates = {name: (episode_dataset(slice_, p.key, args.workers, args.repeats, ordered=True,
                                                    history=args.history),
                                    stream_local(slice_, p.key, args.workers, args.repeats, args.history))
                             for name, p in with_history.items()}
        random = {name: episode_dataset(slice_, p.key, args.workers, args.repeats) for name, p in packs.items()}
        ordered = {name: episode_dataset(slice_, p.key, args.workers, args.repeats, ordered=True)
                   for name, p in packs.items()}
        sampled = {name: episode_dataset(slice_, p.key, args.workers, args.repeats, ordered=True, sampler=True)
                   for name, p in packs.items()}

    (jn, vn) = list(packs)
    print(f"\nslice: {shape[0]} real frames at {SIZE[1]}x{SIZE[0]} x {args.copies} = {jpeg.samples} samples in "
          f"{episodes} episodes; {args.workers} DataLoader workers, batches of 64, medians of {args.repeats}")
    print(f"\n{'':34} {jn:>14} {vn:>14} {'video / JPEG':>13}  target")
    rows = [
        ("pack bytes (MiB)", sizes[jn] / 2**20, sizes[vn] / 2**20, "<= 0.15"),
        ("PSNR against the frames packed (dB)", quality[jn], quality[vn], "within 1.5 dB"),
        ("streaming: first epoch fetched (MiB)", streamed[jn]["fetched"] / 2**20, streamed[vn]["fetched"] / 2**20,
         "<= 0.2"),
        ("streaming, cached: CPU ms/sample", 1000 * streamed[jn]["cpu"], 1000 * streamed[vn]["cpu"], "<= 1.5"),
        ("streaming: episodes/batch / uniform", streamed[jn]["mix"], streamed[vn]["mix"], ">= 0.9"),
        ("streaming: worker peak RSS (MiB)", streamed[jn]["peak"], streamed[vn]["peak"], "+300 MiB"),
        ("streaming: first batch, from S3 (s)", streamed[jn]["first"], streamed[vn]["first"], "<= 0.5 s"),
        ("streaming: first batch, cached (s)", streamed[jn]["cached_first"], streamed[vn]["cached_first"], "<= 0.5 s"),
        ("EpisodeDataset: CPU ms/sample", 1000 * random[jn]["cpu"], 1000 * random[vn]["cpu"], "<= 3"),
        ("EpisodeDataset: first batch (s)", random[jn]["first"], random[vn]["first"], "<= 0.5 s"),
        ("EpisodeDataset: frames decoded/sample", random[jn]["decoded"] or 1.0, random[vn]["decoded"], ""),
        ("streaming, cached: samples/s", streamed[jn]["rate"], streamed[vn]["rate"], ""),
        ("streaming, first epoch from S3: samples/s", streamed[jn]["first_rate"], streamed[vn]["first_rate"], ""),
        ("  its requests to S3 (the epoch's)", streamed[jn]["requests"], streamed[vn]["requests"], ""),
        ("streaming, first epoch cached: samples/s", streamed[jn]["first_cached_rate"],
         streamed[vn]["first_cached_rate"], ""),
        ("EpisodeDataset shuffled: samples/s", random[jn]["rate"], random[vn]["rate"], ""),
        ("EpisodeDataset(batch_size): samples/s", ordered[jn]["rate"], ordered[vn]["rate"], ""),
        ("  its CPU ms/sample", 1000 * ordered[jn]["cpu"], 1000 * ordered[vn]["cpu"], ""),
        ("  its first epoch's CPU ms/sample", 1000 * ordered[jn]["first_epoch_cpu"],
         1000 * ordered[vn]["first_epoch_cpu"], ""),
        ("  its frames decoded/sample", ordered[jn]["decoded"] or 1.0, ordered[vn]["decoded"], ""),
        ("  its episodes/batch / uniform", ordered[jn]["mix"], ordered[vn]["mix"], ">= 0.9"),
        ("ClipBatchSampler: samples/s", sampled[jn]["rate"], sampled[vn]["rate"], ""),
        ("  its CPU ms/sample", 1000 * sampled[jn]["cpu"], 1000 * sampled[vn]["cpu"], ""),
        ("  its frames decoded/sample", sampled[jn]["decoded"] or 1.0, sampled[vn]["decoded"], ""),
        ("  its episodes/batch / uniform", sampled[jn]["mix"], sampled[vn]["mix"], ">= 0.9"),
    ]
    for name, a, b, target in rows:
        ratio = f"{b - a:+13.2f}" if "PSNR" in name or "RSS" in name else \
            (f"{b / a:13.2f}" if a and "first batch" not in name else f"{'':13}")
        print(f"{name:34} {a:14.3f} {b:14.3f} {ratio}  {target}")
    for name in (jn, vn):
        print(f"{name}: the first epoch from S3 at {streamed[name]['first_rate'] / streamed[name]['rate']:.2f}x the "
              f"cached epoch's samples/s (target >= 0.9), {streamed[name]['requests']:.0f} requests to S3 for its "
              f"{streamed[name]['samples']:.0f} samples (whole shards, fetched once into the cache); "
              f"{streamed[name]['first_rate'] / streamed[name]['first_cached_rate']:.2f}x a first epoch of new "
              "workers whose shards are cached (what S3 costs; the rest is the workers' warm-up)")
        print(f"{name}: random access at {random[name]['rate'] / streamed[name]['rate']:.2f}x streaming's samples/s "
              f"shuffled, {ordered[name]['rate'] / streamed[name]['rate']:.2f}x given the batch size (target >= 0.8), "
              f"{sampled[name]['rate'] / streamed[name]['rate']:.2f}x with ClipBatchSampler (target >= 0.9); "
              f"first epoch {ordered[name]['first_epoch_cpu'] / ordered[name]['cpu']:.2f}x the steady state's CPU "
              "(target <= 1.2)")
    rate, cpu = reference
    print(f"PyAV's own decode of the same packets (one thread, to RGB): {rate:.0f} frames/s, {cpu:.3f} ms CPU a "
          f"frame; {vn} streamed: {1000 * streamed[vn]['cpu'] / cpu:.2f}x its CPU a sample, "
          f"{streamed[vn]['rate'] / rate:.2f}x its rate on {args.workers} workers; with ClipBatchSampler "
          f"{1000 * sampled[vn]['cpu'] / cpu:.2f}x its CPU, {sampled[vn]['rate'] / rate:.2f}x its rate")
    if with_history:
        print_history(video, with_history, args.history)
        for name, (r, st) in history_rates.items():
            print(f"  {name}, each sample with its {args.history} frames before: streamed (local) {st['rate']:.0f} "
                  f"samples/s, {1000 * st['cpu']:.2f} CPU ms/sample; EpisodeDataset(batch_size) {r['rate']:.0f} "
                  f"samples/s, {1000 * r['cpu']:.2f} CPU ms/sample, {r['decoded']:.2f} frames decoded/sample: random "
                  f"access at {r['rate'] / st['rate']:.2f}x streaming's rate (target >= 0.8)")
    kept_bytes = sum(sh.bytes for sh in kept.shards)
    v = kept.schema["wrist/rgb"].video
    print(f"\nLeRobot v3.0 example ({source.name}, {source.stat().st_size / 2**20:.2f} MiB of AV1), packed "
          f"--codec keep at 30 fps: {kept_bytes / 2**20:.2f} MiB = {kept_bytes / source.stat().st_size:.2f}x its "
          f"source video (target <= 1.2); {'kept as recorded' if v.kept else 'encoded: ' + str(v.why)}")
    print(f"the S3 server used {server_cpu:.1f} CPU-s over all the streaming epochs (not counted above)")


if __name__ == "__main__":
    main()
