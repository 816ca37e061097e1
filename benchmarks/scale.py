"""Scale benchmark: a slice of a million samples (or ``--samples``) of tiny frames, opened cold.

Builds (once, in ``--store``) demo episodes of 20 s with two 16×16 JPEG cameras at 15 Hz and
15 joints, packs them at 15 fps, then, for ``EpisodeDataset`` (DataLoader, 2 workers,
batches of 64, shuffled) and ``StreamingEpisodeDataset`` (its own batches of 64, 2 workers):
the time to build the dataset, to the first batch, and the largest worker's RSS after
``--batches`` batches, beside the same figures for a small slice of ``--small`` samples
(the issue's bar: per-worker RSS within 50 MB of the small slice's, first batch within 2 s).

    python benchmarks/scale.py [--samples 1000200] [--small 12000] [--store DIR] [--batches 150]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo

SECONDS, FPS = 20.0, 15


def build(store: str, samples: int) -> rayform.Slice:
    client = rayform.Client(store)
    name = f"scale-{samples}"
    for s in client.slices.list():
        if s.name == name:
            return s
    episodes = int(np.ceil(samples / (SECONDS * FPS)))
    print(f"building {name}: {episodes} episodes ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    if samples <= 1_000_200:  # the demo's rendered scenes (4 min for a million samples)
        refs = ingest_demo(client, "scale", DemoConfig(episodes=episodes, seconds=SECONDS + 0.2, seed=5,
                                                       image_size=16, camera_hz=15.0, frame_drop=0.0), progress=True)
    else:  # beyond, frames drawn from a pool of encoded ones: ingest costs what the store costs
        refs = ingest_cycled(client, episodes)
    s = client.slices.create(refs, name=name)
    print(f"  ingested in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    t = time.perf_counter()
    p = client.pack(s, FPS, progress=True)
    print(f"  packed {p.samples} samples in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return s


def ingest_cycled(client: rayform.Client, episodes: int) -> list:
    """Episodes of the demo's streams (two 16×16 JPEG cameras, 15 joints) whose frames cycle
    through 64 pre-encoded ones, and whose joints random-walk."""
    from tqdm import tqdm

    from rayform import ArrayStream, ImageStream
    from rayform.codec import imagecodec

    rng = np.random.default_rng(5)
    pool = [imagecodec.encode_jpeg(rng.integers(0, 255, (16, 16, 3), np.uint8), 90) for _ in range(64)]
    n = int((SECONDS + 0.2) * FPS)
    ts = np.arange(n, dtype=np.int64) * (1_000_000_000 // FPS)
    refs = []
    for e in tqdm(range(episodes), desc="episodes"):
        start = int(rng.integers(0, 64))
        frames = [pool[(start + i) % 64] for i in range(n)]
        joints = np.cumsum(rng.normal(0, 0.01, (n, 15)), axis=0).astype(np.float32)
        refs.append(client.segments.add("scale", f"episode-{e:06d}", [
            ImageStream("cam0/rgb", ts, frames), ImageStream("wrist/rgb", ts + 1000, frames[::-1]),
            ArrayStream("joints/position", ts, joints),
        ], {"task": "cycle"}))
    return refs


def worker_peak_mib() -> float:
    peak = 0.0
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
            except OSError:
                continue
    return peak


def measure(slice_: rayform.Slice, streaming: bool, batches: int) -> tuple[float, float, float, int]:
    """(seconds to build, seconds to the first batch, largest worker RSS MiB, samples)."""
    from torch.utils.data import DataLoader

    t = time.perf_counter()
    kw = dict(obs=["cam0/rgb", "wrist/rgb", "joints/position"], action="joints/position_delta", fps=FPS)
    if streaming:
        ds = rayform.torch.StreamingEpisodeDataset(slice_, **kw, batch_size=64)
        loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    else:
        ds = rayform.torch.EpisodeDataset(slice_, **kw)
        loader = DataLoader(ds, batch_size=64, num_workers=2, shuffle=True, persistent_workers=True)
    built = time.perf_counter() - t
    t = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - t
    peak = 0.0
    for n, _ in enumerate(it):
        if n % 10 == 0:
            peak = max(peak, worker_peak_mib())
        if n >= batches:
            break
    peak = max(peak, worker_peak_mib())
    del it, loader
    return built, first, peak, len(ds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=1_000_200)
    ap.add_argument("--small", type=int, default=12_000)
    ap.add_argument("--store", default=str(Path.home() / ".cache" / "rayform-bench" / "scale"))
    ap.add_argument("--batches", type=int, default=150)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    small, large = build(args.store, args.small), build(args.store, args.samples)
    print(f"\n{'':44} {'samples':>9} {'build':>7} {'1st batch':>10} {'worker RSS':>11}")
    for streaming in (False, True):
        name = "StreamingEpisodeDataset" if streaming else "EpisodeDataset"
        for s in (small, large):
            built, first, peak, n = measure(s, streaming, args.batches)
            print(f"{name:44} {n:9d} {built:6.2f}s {first:9.2f}s {peak:9.0f} MiB")


if __name__ == "__main__":
    main()
