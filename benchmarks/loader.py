"""Loader benchmark: EpisodeDataset through a DataLoader, against the JPEG-decode bound.

Workload: two 224×224 JPEG q90 cameras and 14 joints at 15 fps, horizon 16, 12,000
samples, DataLoader(num_workers=2, batch_size=64, shuffle=True), warm cache. Printed in
one run, on the same bytes:

- bound: samples/s at which ONE process decodes the same JPEG bytes with the fastest
  installed decoder (2 images per sample), nothing else (median of 3: before the loaders,
  and twice after the first);
- webdataset: a plain webdataset pipeline over the same shards (fast decoder, same loader);
- rayform: EpisodeDataset, second epoch (first epoch and time to first batch too);
- ratios to the bound, and peak RSS.

    python benchmarks/loader.py [--samples 12000] [--store DIR] [--epochs 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

import rayform
from rayform.codec import imagecodec, records
from rayform.converters.demo import DemoConfig, ingest_demo

FPS = 15


def build_slice(store: str, samples: int) -> rayform.Slice:
    client = rayform.Client(store)
    seconds = 50.0
    episodes = int(np.ceil(samples / (seconds * FPS)))
    # 13 joints + gripper = 14 values; cameras at 15 Hz so no frame is rendered in vain.
    config = DemoConfig(episodes=episodes, seconds=seconds + 1.2, seed=123, joints=13, camera_hz=15.0,
                        frame_drop=0.0)
    name = f"bench-{samples}"
    for s in client.slices.list():
        if s.name == name:
            return s
    print(f"building the benchmark slice: {episodes} episodes of {seconds:g} s ...", file=sys.stderr, flush=True)
    refs = ingest_demo(client, "bench", config, progress=True)
    return client.slices.create(refs, name=name)


def shard_paths(client: rayform.Client, pack: rayform.Pack) -> list[str]:
    return [str(client.store.local_blob(s.sha256)) for s in pack.shards]


def jpeg_blobs(paths: list[str], limit: int) -> list[bytes]:
    """The JPEG members of the shards, ``2 * limit`` of them (two cameras a sample)."""
    import tarfile

    blobs = []
    for p in paths:
        with tarfile.open(p) as tf:
            for ti in tf.getmembers():
                if ti.name.endswith(".jpg"):
                    blobs.append(tf.extractfile(ti).read())
                if len(blobs) >= 2 * limit:
                    return blobs
    return blobs


def jpeg_bound(paths: list[str], pack: rayform.Pack, limit: int) -> tuple[float, float, float]:
    """One process decoding the pack's JPEG bytes: (samples/s, mean bytes per image, CPU
    seconds per sample)."""
    blobs = jpeg_blobs(paths, limit)
    for b in blobs[:50]:
        imagecodec.decode_jpeg(b)
    t, c = time.perf_counter(), time.process_time()
    for b in blobs:
        imagecodec.decode_jpeg(b)
    dt, dc = time.perf_counter() - t, time.process_time() - c
    return (len(blobs) / 2) / dt, float(np.mean([len(b) for b in blobs])), dc / (len(blobs) / 2)


def pure_decode_cpu(paths: list[str], limit: int, repeats: int = 3) -> float:
    """CPU seconds per sample of decoding the same JPEGs into one reused array: the decoder's
    work alone, no allocation (the bound's decode allocates each image; on this machine that
    moves its figure by up to 15% from one measure to the next), median of ``repeats``."""
    blobs = jpeg_blobs(paths, limit)
    out = imagecodec.decode_jpeg(blobs[0])
    measures = []
    for _ in range(repeats):
        c = time.process_time()
        for b in blobs:
            imagecodec.decode_jpeg_into(b, out)
        measures.append((time.process_time() - c) / (len(blobs) / 2))
    return float(np.median(measures))


def _wds_decode(sample):
    low = records.loads(sample["lowdim.mp"])
    fut = records.unpack_array(low["arrays"]["joints/position"]["future"])
    import torch

    return {
        "cam0/rgb": torch.from_numpy(imagecodec.decode_jpeg(sample["cam0.rgb.jpg"])).permute(2, 0, 1),
        "wrist/rgb": torch.from_numpy(imagecodec.decode_jpeg(sample["wrist.rgb.jpg"])).permute(2, 0, 1),
        "joints/position": torch.from_numpy(fut[0].astype(np.float32)),
        "action": torch.from_numpy((fut[1:17] - fut[0]).astype(np.float32)),
    }


def _children() -> list[str]:
    out = []
    for task in Path("/proc/self/task").iterdir():
        try:
            out += (task / "children").read_text().split()
        except OSError:
            continue
    return out


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and every live child (DataLoader workers),
    plus the children already reaped."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _children():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def live_worker_peak_mib(exclude: int | None = None) -> float:
    """The largest peak RSS (VmHWM) of the live children (but ``exclude``), e.g. persistent
    DataLoader workers."""
    peak = 0.0
    for pid in _children():
        if exclude is not None and int(pid) == exclude:
            continue
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:
            continue
    return peak


def run_loader(loader, epochs: int, set_epoch=None, episodes: list | None = None, between=None
               ) -> list[tuple[float, float, int, float]]:
    """Per epoch: (seconds to first batch, samples/s, samples, CPU seconds per sample in all
    processes). ``episodes``: gets, per epoch, the episode (segment id) of every sample of
    every batch, for the mixing measure; ``between``: called after each epoch, untimed."""
    out = []
    for epoch in range(epochs):
        if set_epoch:
            set_epoch(epoch)
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        first = None
        n = 0
        seen: list = []
        for batch in loader:
            if first is None:
                first = time.perf_counter() - t0
            n += len(batch["t_ns"]) if "t_ns" in batch else len(batch["action"])
            if episodes is not None:
                seen.append(list(batch["meta"]["segment"]))
        if episodes is not None:
            episodes.append(seen)
        out.append((first, n / (time.perf_counter() - t0), n, (cpu_seconds() - c0) / max(n, 1)))
        if between:
            between()
    return out


def peak_rss_mib() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return me, kids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=12_000)
    ap.add_argument("--store", default=str(Path.home() / ".cache" / "rayform-bench" / "store"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-webdataset", action="store_true")
    ap.add_argument("--resize", help="also EpisodeDataset with resize=HxW (decoded at that size; × the full-size bound)")
    ap.add_argument("--history", type=int, default=0,
                    help="also EpisodeDataset with this many steps of history on both cameras (its bound: ÷ N decodes)")
    args = ap.parse_args()

    import torch
    import webdataset as wds
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    slice_ = build_slice(args.store, args.samples)
    client = rayform.Client(args.store)
    pack = client.pack(slice_, FPS, max_horizon=16, progress=True)
    n = min(args.samples, pack.samples)
    paths = shard_paths(client, pack)

    bounds = [jpeg_bound(paths, pack, min(n, 4000))]
    bound, jpeg_bytes, bound_cpu = bounds[0]
    print(f"slice {slice_.id}: {pack.samples} samples, {len(pack.shards)} shards, "
          f"mean JPEG {jpeg_bytes / 1024:.1f} KiB, decoder {imagecodec.jpeg_backend()}")
    rows: list = []

    if not args.skip_webdataset:
        pipe = (wds.WebDataset(paths, shardshuffle=len(paths), nodesplitter=None, workersplitter=wds.split_by_worker,
                               empty_check=False)
                .shuffle(1000).map(_wds_decode).batched(64))
        loader = DataLoader(pipe, batch_size=None, num_workers=args.workers, persistent_workers=True)
        res = run_loader(loader, args.epochs)
        rows.append(("webdataset pipeline (simplejpeg)", res[-1][1], res[0][0], res[0][1], res[-1][3]))

    dataset = rayform.torch.EpisodeDataset(slice_, obs=["cam0/rgb", "wrist/rgb", "joints/position"],
                                           action="joints/position_delta", fps=FPS, horizon=16, frame="ros")
    loader = DataLoader(dataset, batch_size=64, num_workers=args.workers, shuffle=True, persistent_workers=True)
    # the bound measured again just before and after each epoch: on a shared machine one measure
    # of it moves by 15% within a minute, so each epoch's CPU is also set against its neighbours
    beside = [jpeg_bound(paths, pack, min(n, 4000))]
    res = run_loader(loader, args.epochs, dataset.set_epoch,
                     between=lambda: beside.append(jpeg_bound(paths, pack, min(n, 4000))))
    rows.append(("rayform EpisodeDataset", res[-1][1], res[0][0], res[0][1], res[-1][3]))
    paired = [r[3] / ((a[2] + b[2]) / 2) for r, a, b in zip(res, beside, beside[1:])]
    worker_peak = live_worker_peak_mib()
    bounds += beside
    bound, bound_cpu = float(np.median([b[0] for b in bounds])), float(np.median([b[2] for b in bounds]))
    rows.insert(0, (f"bound: 1 process decoding the JPEGs, median of {len(bounds)}", bound, None, None, bound_cpu))
    del loader

    if args.resize:
        size = tuple(int(v) for v in args.resize.lower().split("x"))
        dataset = rayform.torch.EpisodeDataset(slice_, obs=["cam0/rgb", "wrist/rgb", "joints/position"],
                                               action="joints/position_delta", fps=FPS, horizon=16, frame="ros",
                                               resize=size)
        loader = DataLoader(dataset, batch_size=64, num_workers=args.workers, shuffle=True, persistent_workers=True)
        res = run_loader(loader, args.epochs, dataset.set_epoch)
        rows.append((f"rayform, resize={args.resize} (× full-size bound)", res[-1][1], res[0][0], res[0][1],
                     res[-1][3]))
        del loader

    if args.history > 1:
        n_hist = args.history
        client.pack(slice_, FPS, max_horizon=16, max_history=n_hist - 1, progress=True)
        dataset = rayform.torch.EpisodeDataset(slice_, obs=["cam0/rgb", "wrist/rgb", "joints/position"],
                                               action="joints/position_delta", fps=FPS, horizon=16, frame="ros",
                                               history={"cam0/rgb": n_hist, "wrist/rgb": n_hist})
        loader = DataLoader(dataset, batch_size=64, num_workers=args.workers, shuffle=True, persistent_workers=True)
        res = run_loader(loader, args.epochs, dataset.set_epoch)
        # N frames decoded per camera per sample: its bound is the decode rate ÷ N; shown as that ratio
        rows.append((f"rayform, history {n_hist} (× bound÷{n_hist})", res[-1][1], res[0][0], res[0][1],
                     res[-1][3] / n_hist, n_hist))

    # CPU ms/sample: every process of the loader, last epoch; "× decode CPU": over the bound's
    print(f"\n{'loader':40} {'samples/s':>10} {'× bound':>8} {'CPU ms/smp':>10} {'× decode CPU':>12} "
          f"{'1st batch':>10} {'epoch 1':>9}")
    for name, rate, first, e1, cpu, *decodes in rows:
        extra = f"{first:9.2f}s {e1:9.0f}" if first is not None else ""
        per_sample = decodes[0] if decodes else 1  # frames decoded per camera per sample
        print(f"{name:40} {rate:10.0f} {rate * per_sample / bound:8.2f} {1000 * cpu:10.3f} {cpu / bound_cpu:12.2f} "
              f"{extra}")
    warm = paired[1:] or paired
    print(f"\nrayform EpisodeDataset's CPU per sample over the bound's measured just before and after "
          f"each epoch: {', '.join(f'{p:.2f}' for p in paired)} (median of the epochs after the first: "
          f"{float(np.median(warm)):.2f})")
    pure = pure_decode_cpu(paths, min(n, 4000))
    print(f"pure decode (the same JPEGs into one reused array, no allocation): {1000 * pure:.3f} ms/sample; "
          + ", ".join(f"{name.split(' (')[0]} {cpu / pure:.2f}×" for name, _, _, _, cpu, *_ in rows[1:]))
    me, _ = peak_rss_mib()
    print(f"peak RSS: main {me:.0f} MiB, largest EpisodeDataset worker {worker_peak:.0f} MiB; "
          f"cpu cores: {os.cpu_count()}")


if __name__ == "__main__":
    main()
