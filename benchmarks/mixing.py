"""Mixing benchmark: how many distinct episodes a batch holds, against uniform sampling.

Makes the demo slice (40 episodes × 20 s by default, as `rayform demo --episodes 40
--seconds 20`), packs it in time order and interleaved at 15 fps, and prints the mixing
(``rayform.diagnostics.batch_mixing``) of batches of 64 streamed by ``StreamingEpisodeDataset`` from each
pack and of ``EpisodeDataset`` with ``shuffle=True``, through DataLoader(num_workers=2).

    python benchmarks/mixing.py [--episodes 40] [--seconds 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import tempfile

from torch.utils.data import DataLoader

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.diagnostics.batch_mixing import mixing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    kw = dict(obs=["joints/position"], action="joints/position_delta", fps=15)
    with tempfile.TemporaryDirectory() as d:
        client = rayform.Client(d)
        config = DemoConfig(episodes=args.episodes, seconds=args.seconds)
        s = client.slices.create(ingest_demo(client, "lab", config, progress=False), name="demo")
        for seed in (None, 0):  # time order first: the datasets take the interleaved pack once there is one
            pack = client.pack(s, 15, progress=False, interleave_seed=seed)
            ds = rayform.torch.StreamingEpisodeDataset(s, **kw)
            assert ds.pack.digest == pack.digest
            batches = [list(b["meta"]["segment"]) for b in DataLoader(ds, batch_size=64, num_workers=args.workers)]
            layout = "time order" if seed is None else "interleaved"
            print(f"streaming, {layout:11} ({pack.samples} samples, {len(pack.shards)} shards): "
                  f"{mixing(batches, args.episodes)}")
        ds = rayform.torch.EpisodeDataset(s, **kw)
        loader = DataLoader(ds, batch_size=64, num_workers=args.workers, shuffle=True)
        print(f"EpisodeDataset, shuffle=True: {mixing([list(b['meta']['segment']) for b in loader], args.episodes)}")


if __name__ == "__main__":
    main()
