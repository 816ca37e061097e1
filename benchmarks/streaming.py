"""Streaming benchmark: StreamingEpisodeDataset from a real S3 endpoint on loopback.

Same workload and reference as benchmarks/loader.py (two 224×224 JPEG q90 cameras, 14
joints, 15 fps, horizon 16, 12,000 samples, DataLoader(num_workers=2, batch_size=64)).
Prints, in one run: the one-process JPEG-decode rate of the same bytes (the bound), a plain
webdataset pipeline over the same shards, and the streaming dataset's first epoch (from S3,
cold cache) and second epoch (from the cache), with their ratios. The cold and cached
epochs are measured in ``--repeats`` pairs (a new cache each) and reported as medians: on a
shared machine one epoch alone can be off by 20%.

The S3 endpoint is moto's server in its own process on 127.0.0.1: on a 2-core machine it
competes with the loader for CPU, which a real object store does not (its CPU time in the
first epoch is printed).

    python benchmarks/streaming.py [--samples 12000] [--store DIR] [--epochs 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loader as bench

import rayform
from rayform.diagnostics.batch_mixing import mixing
from rayform.ops.references import pack_data
from rayform.store.store import Store


def start_moto(log: str | None = None) -> tuple[subprocess.Popen, str]:
    """A moto S3 server on loopback; ``log``: a file its request log goes to (a line a request)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=open(log, "w") if log else subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/moto-api/")
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=12_000)
    ap.add_argument("--store", default=str(Path.home() / ".cache" / "rayform-bench" / "store"))
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="cold + cached epoch pairs, each with a new cache")
    ap.add_argument("--time-order", action="store_true", help="stream a pack in time order, not interleaved")
    args = ap.parse_args()

    import boto3
    import fsspec
    import torch
    import webdataset as wds
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    slice_ = bench.build_slice(args.store, args.samples)
    local = rayform.Client(args.store)
    pack = local.pack(slice_, bench.FPS, max_horizon=16, progress=True,
                      interleave_seed=None if args.time_order else 0)
    paths = bench.shard_paths(local, pack)
    bounds, bound_cpus = [], []

    def measure_bound() -> float:
        rate, mean_bytes, cpu = bench.jpeg_bound(paths, pack, min(pack.samples, 4000))
        bounds.append(rate)
        bound_cpus.append(cpu)
        return mean_bytes

    jpeg_bytes = measure_bound()

    moto, endpoint = start_moto()
    try:
        options = {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                     aws_secret_access_key="bench").create_bucket(Bucket="bench")
        fs = fsspec.filesystem("s3", **options)
        print(f"uploading {len(pack.shards)} shards to {endpoint} ...", file=sys.stderr, flush=True)
        root = Path(local.store.root)
        needed = [f"refs/slices/{slice_.id}.json", f"refs/packs/{slice_.id}/{pack.key}.json"]
        needed += [Store.blob_key(d) for d in [slice_.digest, pack.digest, *pack_data(pack)]]
        for key in needed:
            fs.put_file(str(root / key), f"bench/store/{key}")

        rows = []
        pipe = (wds.WebDataset(paths, shardshuffle=len(paths), nodesplitter=None, workersplitter=wds.split_by_worker,
                               empty_check=False).shuffle(1000).map(bench._wds_decode).batched(64))
        res = bench.run_loader(DataLoader(pipe, batch_size=None, num_workers=args.workers, persistent_workers=True),
                               args.epochs)
        rows.append(("webdataset pipeline, local shards", res[-1][1], res[0][0], res[-1][3]))

        cold, cached, firsts, server_cpu, mixes, cold_cpu, cached_cpu = [], [], [], [], [], [], []
        worker_peaks: list[float] = []
        for r in range(args.repeats):  # the bound, a cold and a cached epoch in turn: drift hits all alike
            if r:
                measure_bound()
            with tempfile.TemporaryDirectory() as cache:
                remote = rayform.Client("s3://bench/store", storage_options=options, cache=cache)
                ds = rayform.torch.StreamingEpisodeDataset(
                    remote.slices.get(slice_.id), obs=["cam0/rgb", "wrist/rgb", "joints/position"],
                    action="joints/position_delta", fps=bench.FPS, horizon=16, frame="ros", batch_size=64)
                loader = DataLoader(ds, batch_size=None, num_workers=args.workers, persistent_workers=True)
                server_before = cpu_seconds(moto.pid)
                seen: list = []
                res = bench.run_loader(loader, args.epochs, ds.set_epoch, seen)  # only epoch 1 reaches the server
                mixes += [mixing(epoch, len(slice_.segments)) for epoch in seen]
                server_cpu.append(cpu_seconds(moto.pid) - server_before)
                worker_peaks.append(bench.live_worker_peak_mib(exclude=moto.pid))  # the persistent workers, still alive
                del loader
            cold.append(res[0][1])
            cached.append(res[-1][1])
            firsts.append(res[0][0])
            cold_cpu.append(res[0][3] - server_cpu[-1] / res[0][2])  # the loader's own, not the server's
            cached_cpu.append(res[-1][3])
        rows.append((f"rayform streaming, epoch 1 (from S3), median of {args.repeats}", median(cold), median(firsts),
                     median(cold_cpu)))
        rows.append((f"rayform streaming, epoch {args.epochs} (cache), median", median(cached), None, median(cached_cpu)))
    finally:
        moto.kill()

    bound, bound_cpu = median(bounds), median(bound_cpus)
    rows.insert(0, (f"bound: 1 process decoding the JPEGs, median of {len(bounds)}", bound, None, bound_cpu))
    print(f"slice {slice_.id}: {pack.samples} samples in {len(pack.shards)} shards, mean JPEG "
          f"{jpeg_bytes / 1024:.1f} KiB")
    # CPU ms/sample: every process of the loader (not the S3 server); "× decode CPU": over the bound's
    print(f"\n{'loader':52} {'samples/s':>10} {'× bound':>8} {'CPU ms/smp':>10} {'× decode CPU':>12} {'1st batch':>10}")
    for name, rate, first, cpu in rows:
        print(f"{name:52} {rate:10.0f} {rate / bound:8.2f} {1000 * cpu:10.3f} {cpu / bound_cpu:12.2f} "
              + (f"{first:9.2f}s" if first is not None else ""))
    pure = bench.pure_decode_cpu(paths, min(pack.samples, 4000))
    print(f"\npure decode (the same JPEGs into one reused array, no allocation): {1000 * pure:.3f} ms/sample; "
          + ", ".join(f"{short} {cpu / pure:.2f}×" for short, (_, _, _, cpu)
                      in zip(["webdataset", "first epoch from S3", "cached epoch"], rows[1:])))
    paired = [c / b for c, b in zip(cached_cpu, bound_cpus)]  # the bound is measured just before each pair
    print(f"cached epoch's CPU over the bound measured just before its pair: "
          f"{', '.join(f'{p:.2f}' for p in paired)} (median {median(paired):.2f})")
    ratios = [c / w for c, w in zip(cold, cached)]
    print(f"\nfirst epoch from S3 / cached epoch: median {median(ratios):.2f} (each pair: "
          f"{', '.join(f'{r:.2f}' for r in ratios)}); the S3 server used a median "
          f"{median(server_cpu):.1f} CPU-s of the same cores in each first epoch")
    print(f"batches of 64 ({'time order' if args.time_order else 'interleaved'} pack, every epoch): "
          f"{median([m.mean_distinct for m in mixes]):.1f} distinct episodes, uniform sampling "
          f"{mixes[0].uniform:.1f}: {median([m.ratio for m in mixes]):.2f}× (epochs: "
          f"{', '.join(f'{m.ratio:.2f}' for m in mixes)}); lag-1 correlation of episodes "
          f"{median([m.lag1 for m in mixes]):+.2f}")
    me, _ = bench.peak_rss_mib()
    print(f"peak RSS: main {me:.0f} MiB, largest DataLoader worker {max(worker_peaks):.0f} MiB (the S3 server's "
          "own is not counted)")


if __name__ == "__main__":
    main()
