"""Stream a slice straight from object storage with StreamingEpisodeDataset.

    python examples/streaming.py --store s3://bucket/rayform --slice slc_… [--endpoint-url http://…]
    torchrun --nproc_per_node 2 examples/streaming.py --store s3://bucket/rayform --slice slc_…

Credentials come from the usual AWS variables (or pass --endpoint-url for any S3-compatible
store). Each rank streams its own part of every epoch, writing what it streams into the
shard cache: the second epoch reads from disk.
"""

from __future__ import annotations

import argparse
import os
import time

import torch.distributed as dist
from torch.utils.data import DataLoader

import rayform


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True, help="e.g. s3://bucket/rayform")
    ap.add_argument("--slice", required=True)
    ap.add_argument("--endpoint-url", help="an S3-compatible endpoint (MinIO, Ceph, a local test server)")
    ap.add_argument("--fps", type=float, default=15)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("gloo")
    options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    client = rayform.Client(args.store, storage_options=options)
    dataset = rayform.torch.StreamingEpisodeDataset(
        client.slices.get(args.slice),
        obs=["cam0/rgb", "wrist/rgb", "joints/position"],
        action="joints/position_delta",
        fps=args.fps,
        horizon=16,
        frame="ros",
        shuffle=rayform.torch.ShuffleConfig(seed=0, buffer=1000),
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    rank = dist.get_rank() if dist.is_initialized() else 0
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["t_ns"])
        rate = n / (time.perf_counter() - t0)
        print(f"rank {rank} epoch {epoch}: {n} samples ({len(dataset)} per rank), {rate:.0f} samples/s", flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
