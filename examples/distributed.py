"""The product page's distributed snippet under torchrun (gloo here; nccl on GPUs).

    torchrun --standalone --nproc_per_node 2 examples/distributed.py [--slice demo] [--epochs 2]

Each rank reads a disjoint part of every epoch through DistributedSampler; every rank
prints how many samples it saw and a checksum of their keys, and rank 0 checks that the
ranks together covered the slice exactly once per epoch.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import rayform


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store")
    ap.add_argument("--slice", default="demo", help="slice id or name (default: the demo slice, see rayform demo)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", help="write each rank's sample keys here (one file per rank and epoch)")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    client = rayform.Client(args.store)
    slice_ = client.slices.get(args.slice)

    dataset = rayform.torch.EpisodeDataset(slice_, obs=["cam0/rgb"], action="joints/position_delta", fps=15)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=args.workers)

    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)  # same order for the same seed and epoch
        sampler.set_epoch(epoch)
        keys = []
        for batch in loader:
            keys += [f"{s}:{int(t)}" for s, t in zip(batch["meta"]["segment"], batch["t_ns"])]
        if args.out:
            with open(os.path.join(args.out, f"rank{rank}-epoch{epoch}.txt"), "w") as f:
                f.write("\n".join(keys))
        digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
        print(f"rank {rank}/{world} epoch {epoch}: {len(keys)} samples, keys {digest}", flush=True)
        gathered = [None] * world
        dist.all_gather_object(gathered, keys)
        if rank == 0:
            every = [k for ks in gathered for k in ks]
            unique = len(set(every))
            print(f"epoch {epoch}: {len(every)} samples over {world} ranks, {unique} distinct, "
                  f"slice has {len(dataset)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except rayform.RayformError as e:  # one line, as the rayform command says it
        print(f"distributed.py: error: {e}", file=sys.stderr)
        sys.exit(2)
