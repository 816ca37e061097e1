"""Train a small policy on a slice: the product page's five lines, grown into a real run.

    python examples/train.py                 # the demo slice in the default store (made if absent)
    python examples/train.py --slice demo    # any slice (id or name) with cam0/rgb, wrist/rgb, joints/position

A tiny CNN per camera and an MLP over the joints predict the next ``horizon`` joint deltas
(an action chunk). The loss is logged with samples/s; it goes down.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

import rayform

log = logging.getLogger("train")
CAMERAS = ["cam0/rgb", "wrist/rgb"]


def demo_slice(client: rayform.Client) -> rayform.Slice:
    """The store's demo slice (``rayform demo`` names it "demo"), made first if there is none."""
    try:
        return client.slices.get("demo")
    except rayform.SliceNotFound:
        pass
    from rayform.converters.demo import DemoConfig, ingest_demo

    log.info("no demo slice in %s: making one (6 simulated episodes)", client.store.display)
    return client.slices.create(ingest_demo(client, "demo", DemoConfig(), progress=True), name="demo")


class Policy(nn.Module):
    def __init__(self, joints: int, horizon: int):
        super().__init__()
        self.horizon, self.joints = horizon, joints
        self.cameras = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(3, 16, 8, stride=4), nn.ReLU(),
                nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(),
                nn.Conv2d(32, 32, 3, stride=2), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            )
            for _ in CAMERAS
        )
        self.head = nn.Sequential(
            nn.Linear(32 * len(CAMERAS) + joints, 256), nn.ReLU(),
            nn.Linear(256, horizon * joints),
        )

    def forward(self, batch: dict) -> torch.Tensor:
        feats = [net(batch[cam].float().div_(255)) for net, cam in zip(self.cameras, CAMERAS)]
        x = torch.cat([*feats, batch["joints/position"]], dim=1)
        return self.head(x).view(-1, self.horizon, self.joints)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="store URL (default: $RAYFORM_STORE or the local default)")
    ap.add_argument("--slice", help="slice id or name (default: the demo slice)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fps", type=float, default=15)
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    # this script's and rayform's messages; other libraries' (botocore, s3fs) only from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for name in ("train", "rayform"):
        logging.getLogger(name).setLevel(logging.INFO)
    torch.manual_seed(args.seed)

    client = rayform.Client(args.store)
    slice_ = client.slices.get(args.slice) if args.slice else demo_slice(client)
    dataset = rayform.torch.EpisodeDataset(
        slice_,
        obs=[*CAMERAS, "joints/position"],
        action="joints/position_delta",
        fps=args.fps,
        horizon=args.horizon,
        frame="ros",
        seed=args.seed,
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers, shuffle=True,
                        persistent_workers=args.workers > 0, drop_last=True,
                        generator=torch.Generator().manual_seed(args.seed))
    log.info("rayform_slice=%s: %d samples at %g fps, %d steps of %d", slice_.id, len(dataset), args.fps,
             args.steps, args.batch_size)

    joints = len(dataset.action_names)
    policy = Policy(joints, args.horizon)
    opt = torch.optim.AdamW(policy.parameters(), lr=args.lr)
    losses: list[float] = []
    step, epoch, seen, t0 = 0, 0, 0, time.perf_counter()
    while step < args.steps:
        dataset.set_epoch(epoch)
        for batch in loader:
            pred = policy(batch)
            keep = (~batch["action_is_pad"]).unsqueeze(-1).float()
            # deltas are small (radians per step): scale so the loss is O(1)
            loss = (F.mse_loss(pred * 10, batch["action"] * 10, reduction="none") * keep).sum() / keep.sum().clamp(min=1) / joints
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            seen += len(batch["t_ns"])
            if step % 25 == 0 or step == 1:
                rate = seen / (time.perf_counter() - t0)
                recent = losses[-25:]
                log.info("step %4d  epoch %d  loss %.4f  %.0f samples/s", step, epoch, sum(recent) / len(recent), rate)
            if step >= args.steps:
                break
        epoch += 1
    k = max(1, min(50, len(losses) // 4))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    log.info("done: loss %.4f -> %.4f over %d steps (%s)", first, last, step,
             "went down" if last < first else "did NOT go down")


if __name__ == "__main__":
    try:
        main()
    except rayform.RayformError as e:  # one line, as the rayform command says it
        print(f"train.py: error: {e}", file=sys.stderr)
        sys.exit(2)
