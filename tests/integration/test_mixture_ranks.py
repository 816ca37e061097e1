"""A two-slice mixture at 0.8/0.2 streamed by two real gloo ranks: every rank the same count,
and over both ranks exactly the epoch's slots, each part's share exact."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch.multiprocessing as tmp

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.order.epoch import pad_draw, repeated
from rayform.order.mixture import MixtureOrder

pytestmark = [pytest.mark.dist, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, store: str, ids: list[str], out: str) -> None:
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    client = rayform.Client(store)
    parts = [(client.slices.get(ids[0]), 0.8), (client.slices.get(ids[1]), 0.2)]
    ds = rayform.torch.StreamingEpisodeDataset(parts, obs=["joints/position"], action="joints/position_delta",
                                               fps=15, seed=4)
    seen = []
    for b in DataLoader(ds, batch_size=16, num_workers=2):
        seen += [[p, s, int(t)] for p, s, t in zip(b["meta"]["part"].tolist(), b["meta"]["segment"], b["t_ns"])]
    Path(out, f"rank{rank}.json").write_text(json.dumps({"len": len(ds), "seen": seen}))
    dist.barrier()
    dist.destroy_process_group()


def test_two_ranks_stream_a_mixture_with_exact_shares(tmp_path):
    client = rayform.Client(tmp_path / "store")
    big = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=3, seconds=5.0, seed=1, image_size=16),
                                           progress=False), name="big")
    small = client.slices.create(ingest_demo(client, "field", DemoConfig(episodes=1, seconds=3.0, seed=2,
                                                                         image_size=16), progress=False), name="small")
    sizes = [client.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16).samples for s in (big, small)]
    tmp.start_processes(_rank, args=(2, _free_port(), str(client.store.root), [big.id, small.id], str(tmp_path)),
                        nprocs=2, join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    per_rank = ranks[0]["len"]
    assert ranks[1]["len"] == per_rank and all(len(r["seen"]) == per_rank for r in ranks)
    order = MixtureOrder(sizes, [0.8, 0.2], seed=4, epoch=0)
    # "pad": the last rank's tail repeats slots drawn from across the epoch (order.epoch)
    slots = repeated(np.arange(2 * per_rank), order.total, pad_draw(order.total, 4, 0))
    expected = np.bincount(order.parts_of(slots), minlength=2).tolist()
    got = np.bincount([p for r in ranks for p, _, _ in r["seen"]], minlength=2).tolist()
    assert got == expected
    assert expected[0] >= order.counts[0] and expected[1] >= order.counts[1]
    # the big part is sampled without replacement: no (segment, time) twice over both ranks within the epoch's N
    big_seen = [(s, t) for r in ranks for p, s, t in r["seen"] if p == 0]
    assert len(big_seen) - len(set(big_seen)) <= 2 * per_rank - order.total
