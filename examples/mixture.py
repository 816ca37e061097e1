"""Train on a weighted mixture of two slices: a real recording (or a second simulated site) and
the simulated demo.

    python examples/mixture.py [PATH/TO/LEROBOT_DATASET] [--weights 0.7 0.3]

With a LeRobot dataset (v2.1 or v3.0), converts it into segments, its ``observation.state``
named ``joints/position`` as the demo's is (its cameras left out: the parts of a mixture must
yield samples laid out alike), and makes a demo slice whose arm has as many joints as the
recording's state (the gripper is the last value). Without one, the first part is a second
simulated site, its own seed. Packs both, and streams one epoch of the mixture: the first part
``--weights[0]`` of every epoch, the demo the rest, each sample's ``meta["part"]`` saying
which. Prints what each part gave and how many episodes a batch holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from torch.utils.data import DataLoader

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo


def recording(client: rayform.Client, lerobot: Path) -> tuple[rayform.Slice, int]:
    """The LeRobot dataset as a slice of its joint states only, and how many joints it has."""
    info = json.loads((lerobot / "meta" / "info.json").read_text())
    cameras = [f for f, spec in info["features"].items() if spec.get("dtype") in ("video", "image")]
    real = client.ingest("lerobot", [lerobot], "lerobot", slice_name=lerobot.name, progress=False,
                         options={"mapping": {"observation.state": "joints/position", **{f: None for f in cameras}},
                                  "allow_missing": True}).slice
    assert real is not None
    first = real.segments[0]
    return real, client.segments.get(first.id, first.version).stream("joints/position").shape[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lerobot", type=Path, nargs="?", help="a LeRobot dataset folder (meta/info.json inside)")
    ap.add_argument("--weights", type=float, nargs=2, default=[0.7, 0.3], metavar=("FIRST", "DEMO"))
    ap.add_argument("--fps", type=float, default=15)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    client = rayform.Client()
    if args.lerobot is not None:
        first, joints = recording(client, args.lerobot)
        about = f"{args.lerobot.name}, a real recording"
    else:
        joints = 8
        first = client.slices.create(ingest_demo(client, "sim-b", DemoConfig(episodes=4, seconds=10, seed=1)),
                                     name="sim-b")
        about = "a second simulated site"
    demo = client.slices.create(ingest_demo(client, "sim", DemoConfig(episodes=6, seconds=10, joints=joints - 1)),
                                name=f"demo-{joints}-joints")
    for s in (first, demo):
        client.pack(s, args.fps, progress=False)

    dataset = rayform.torch.StreamingEpisodeDataset(
        [(first, args.weights[0]), (demo, args.weights[1])],
        obs=["joints/position"], action="joints/position_delta", fps=args.fps, horizon=8, batch_size=args.batch_size,
    )
    parts: Counter[int] = Counter()
    episodes, t0 = [], time.perf_counter()
    for batch in DataLoader(dataset, batch_size=None, num_workers=args.workers):
        parts.update(batch["meta"]["part"].tolist())
        episodes.append(len(set(zip(batch["meta"]["slice"], batch["meta"]["segment"]))))
    seconds = time.perf_counter() - t0
    total = sum(parts.values())
    print(f"{first.id} ({about}, {len(first.segments)} episodes): {parts[0]} samples "
          f"({parts[0] / total:.2f} of the epoch); {demo.id} (demo, {len(demo.segments)} episodes): {parts[1]} "
          f"({parts[1] / total:.2f})")
    print(f"{total} samples in {len(episodes)} batches, {sum(episodes) / len(episodes):.1f} episodes per batch, "
          f"{total / seconds:.0f} samples/s")


if __name__ == "__main__":
    try:
        main()
    except rayform.RayformError as e:  # one line, as the rayform command says it
        print(f"mixture.py: error: {e}", file=sys.stderr)
        sys.exit(2)
