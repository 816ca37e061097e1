"""Scale benchmark: a slice of a million samples (or ``--samples``) of tiny frames, opened cold.

Builds (once, in ``--store``) demo episodes of 20 s with two 16×16 JPEG cameras at 15 Hz and
15 joints, packs them at 15 fps, then, for ``EpisodeDataset`` (DataLoader, 2 workers,
batches of 64, shuffled) and ``StreamingEpisodeDataset`` (its own batches of 64, 2 workers):
the time to build the dataset, to the first batch, and the largest worker's RSS after
``--batches`` batches, beside the same figures for a small slice of ``--small`` samples
(the issue's bar: per-worker RSS within 50 MB of the small slice's, first batch within 2 s).
Each measurement runs in a process of its own, as a training script opens one dataset (a
forked worker's RSS counts its parent's heap, and so whatever an earlier measurement left).

    python benchmarks/scale.py [--samples 1000200] [--small 12000] [--store DIR] [--batches 150]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.pack.packs import Packs

SECONDS, FPS = 20.0, 15


def build(store: str, samples: int, kind: str = "demo") -> rayform.Slice:
    client = rayform.Client(store)
    name = f"scale-{samples}" if kind == "demo" else f"scale-{kind}-{samples}"
    for s in client.slices.list():
        if s.name == name:
            return s
    episodes = int(np.ceil(samples / (SECONDS * FPS)))
    print(f"building {name}: {episodes} episodes ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    if kind == "demo":  # the demo's rendered scenes (4 min for a million samples)
        refs = ingest_demo(client, "scale", DemoConfig(episodes=episodes, seconds=SECONDS + 0.2, seed=5,
                                                       image_size=16, camera_hz=15.0, frame_drop=0.0), progress=True)
    else:
        refs = ingest_cycled(client, episodes, name)
    s = client.slices.create(refs, name=name)
    print(f"  ingested in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    t = time.perf_counter()
    p = client.pack(s, FPS, progress=True, **({} if kind == "demo" else {"max_horizon": 2}))
    print(f"  packed {p.samples} samples in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return s


def ingest_cycled(client: rayform.Client, episodes: int, name: str) -> list:
    """Episodes of one 8×8 JPEG camera whose frames cycle through 64 pre-encoded gradients, and
    two random-walking joints: a sample packs into 2 KiB (two tar members), so that ten million
    of them, their scratch while packing and their segments fit on one disk."""
    from tqdm import tqdm

    from rayform import ArrayStream, ImageStream
    from rayform.codec import imagecodec

    rng = np.random.default_rng(5)
    ramp = np.linspace(0, 255, 8)
    pool = [imagecodec.encode_jpeg(np.stack(np.broadcast_arrays(ramp[:, None] * (k / 64), ramp[None, :],
                                                                np.full((8, 8), 4.0 * k)), -1).astype(np.uint8), 90)
            for k in range(64)]
    n = int((SECONDS + 0.2) * FPS)
    ts = np.arange(n, dtype=np.int64) * (1_000_000_000 // FPS)
    refs = []
    for e in tqdm(range(episodes), desc="episodes"):
        start = int(rng.integers(0, 64))
        joints = np.cumsum(rng.normal(0, 0.01, (n, 2)), axis=0).astype(np.float32)
        refs.append(client.segments.add("scale", f"{name}-{e:06d}", [
            ImageStream("cam0/rgb", ts, [pool[(start + i) % 64] for i in range(n)]),
            ArrayStream("joints/position", ts, joints),
        ], {"task": "cycle"}))
    return refs


def worker_peak_mib() -> float:
    peak = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:  # a thread may end between the listing and the read
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
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
    cameras = [n for n in ("cam0/rgb", "wrist/rgb") if n in slice_.segment(0).streams]
    kw = dict(obs=[*cameras, "joints/position"], action="joints/position_delta", fps=FPS,
              horizon=min(16, Packs(slice_.store).find(slice_, FPS).spec.max_horizon))
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
    ap.add_argument("--kind", choices=["demo", "cycled"], default="demo",
                    help="demo: rendered 16×16 scenes, two cameras; cycled: one 8×8 camera whose frames "
                         "cycle (for ten million samples: python benchmarks/scale.py --kind cycled --samples 10000200)")
    ap.add_argument("--one", nargs=2, metavar=("SLICE", "STREAMING"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.one:  # one measurement, in a process of its own: as a training script opens one dataset
        client = rayform.Client(args.store)
        print(json.dumps(measure(client.slices.get(args.one[0]), args.one[1] == "1", args.batches)))
        return
    small, large = build(args.store, args.small, args.kind), build(args.store, args.samples, args.kind)
    print(f"\n{'':44} {'samples':>9} {'build':>7} {'1st batch':>10} {'worker RSS':>11}")
    for streaming in (False, True):
        name = "StreamingEpisodeDataset" if streaming else "EpisodeDataset"
        for s in (small, large):
            done = subprocess.run([sys.executable, __file__, "--store", args.store, "--batches", str(args.batches),
                                   "--one", s.id, str(int(streaming))], capture_output=True, text=True, check=True)
            built, first, peak, n = json.loads(done.stdout.splitlines()[-1])
            print(f"{name:44} {n:9d} {built:6.2f}s {first:9.2f}s {peak:9.0f} MiB")


if __name__ == "__main__":
    main()
