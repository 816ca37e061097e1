"""Stream a slice straight from object storage with StreamingEpisodeDataset.

    python examples/streaming.py --store s3://bucket/rayform --slice slc_… [--endpoint-url http://…]
    torchrun --nproc_per_node 2 examples/streaming.py --store s3://bucket/rayform --slice slc_…

Credentials come from the usual AWS variables (or pass --endpoint-url for any S3-compatible
store). Each rank streams its own part of every epoch, writing what it streams into the
shard cache: the second epoch reads from disk.

Interrupt and resume, at any world size: ``--checkpoint ckpt.json`` saves where the run
stands (plain JSON: the epoch and the global batches consumed, ``dataset.state_dict(step=…)``)
every ``--checkpoint-every`` batches, and a run started with a checkpoint that exists goes
on from it without repeating or skipping a sample, with any number of ranks and DataLoader
workers, as long as ``--global-batch`` is kept (``--stop-after N`` stops after N batches, as
a crash would). ``--keys-out DIR`` appends each step's sample keys to
``DIR/rank<r>.epoch<e>.txt``, one ``<step> <segment>:<t_ns>`` line per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

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
    ap.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", help="a JSON file: save where the run stands there, and resume from it")
    ap.add_argument("--checkpoint-every", type=int, default=10, help="batches between checkpoints")
    ap.add_argument("--stop-after", type=int, help="stop after this many batches in all, as a crash would")
    ap.add_argument("--keys-out", help="a folder: every sample's key, a file per rank and epoch")
    args = ap.parse_args()

    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    if args.global_batch % world:
        sys.exit(f"--global-batch {args.global_batch} does not split over {world} ranks")
    options = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    client = rayform.Client(args.store, storage_options=options)
    dataset = rayform.torch.StreamingEpisodeDataset(
        client.slices.get(args.slice),
        obs=["cam0/rgb", "wrist/rgb", "joints/position"],
        action="joints/position_delta",
        fps=args.fps,
        horizon=16,
        frame="ros",
        seed=args.seed,
        shuffle=rayform.torch.ShuffleConfig(window=1000),
        batch_size=args.global_batch // world,  # the dataset makes the batches: the same global ones at any world size
    )
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers, persistent_workers=args.workers > 0)

    ckpt = Path(args.checkpoint) if args.checkpoint else None
    start_epoch, start_step = 0, 0
    if ckpt is not None and ckpt.exists():
        saved = json.loads(ckpt.read_text())
        start_epoch, start_step = saved["epoch"], saved["data"]["step"]
        dataset.load_state_dict(saved["data"])  # checks the seed, partitions and global batch
        print(f"rank {rank}: resuming epoch {start_epoch} at step {start_step} from {ckpt}", flush=True)

    def save(epoch: int, step: int) -> None:
        if rank == 0:  # every rank is at the same step: one file says where the run stands
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(json.dumps({"epoch": epoch, "data": dataset.state_dict(step=step)}))
            os.replace(tmp, ckpt)  # a crash mid-write never leaves half a checkpoint

    batches, stopped = 0, False
    for epoch in range(start_epoch, args.epochs):
        if epoch != start_epoch or not start_step:
            dataset.set_epoch(epoch)
        step = start_step if epoch == start_epoch else 0
        keys = open(Path(args.keys_out, f"rank{rank}.epoch{epoch}.txt"), "a") if args.keys_out else None
        t0, n = time.perf_counter(), 0
        for batch in loader:
            n += len(batch["t_ns"])
            batches += 1
            if keys is not None:
                keys.writelines(f"{step} {seg}:{int(t)}\n" for seg, t in zip(batch["meta"]["segment"], batch["t_ns"]))
            step += 1
            stopped = bool(args.stop_after) and batches >= args.stop_after
            if ckpt is not None and (stopped or batches % args.checkpoint_every == 0):
                save(epoch, step)
            if stopped:
                break
        if keys is not None:
            keys.close()
        if stopped:
            print(f"rank {rank}: stopped after {batches} batches, in epoch {epoch}", flush=True)
            break
        rate = n / (time.perf_counter() - t0)
        print(f"rank {rank} epoch {epoch}: {n} samples ({len(dataset)} per rank), {rate:.0f} samples/s", flush=True)
    if ckpt is not None and not stopped:
        ckpt.unlink(missing_ok=True)  # done: a later run starts afresh
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except rayform.RayformError as e:  # one line, as the rayform command says it
        print(f"streaming.py: error: {e}", file=sys.stderr)
        sys.exit(2)
