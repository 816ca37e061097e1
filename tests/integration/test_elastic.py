"""Elastic determinism with real processes: world sizes 1, 2 and 4 (gloo) × DataLoader
workers 0, 1 and 2 make the same global batches; a run stopped at world 4 resumes at world 2
and continues the same sequence exactly."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch.multiprocessing as tmp

pytestmark = [pytest.mark.dist, pytest.mark.slow, pytest.mark.timeout(600)]

GLOBAL_BATCH = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, workers: int, port: int, store: str, slice_id: str, out: str,
          stop_after: int, resume: str) -> None:
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    import rayform

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ds = rayform.torch.StreamingEpisodeDataset(rayform.Client(store).slices.get(slice_id), obs=["joints/position"],
                                               action="joints/position", fps=15, horizon=4, seed=11,
                                               batch_size=GLOBAL_BATCH // world,
                                               split=rayform.torch.Split(partitions=4))  # ranks read their own
    ds.set_epoch(1)
    first = 0
    if resume:
        state = json.loads(Path(resume).read_text())
        ds.load_state_dict(state)
        first = state["step"]
    loader = DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context="fork" if workers else None)
    batches = []
    for batch in loader:  # the j-th batch a rank gets is global step first + j
        batches.append([f"{seg}:{int(t)}" for seg, t in zip(batch["meta"]["segment"], batch["t_ns"])])
        if len(batches) == stop_after:
            if rank == 0:
                Path(out, "state.json").write_text(json.dumps(ds.state_dict(step=first + stop_after)))
            break
    Path(out, f"rank{rank}.json").write_text(json.dumps({"first": first, "batches": batches, "len": len(ds)}))
    dist.barrier()
    dist.destroy_process_group()


def _run(store: str, slice_id: str, out: Path, world: int, workers: int, stop_after: int = 0,
         resume: str = "") -> dict[int, list[str]]:
    """Each global step's batch: the ranks' batches of that step, in rank order."""
    out.mkdir(parents=True, exist_ok=True)
    tmp.start_processes(_rank, args=(world, workers, _free_port(), store, slice_id, str(out), stop_after, resume),
                        nprocs=world, join=True, start_method="spawn")
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    assert len({len(r["batches"]) for r in ranks}) == 1  # every rank made as many steps: no DDP hang
    steps: dict[int, list[str]] = {}
    for r in ranks:
        for j, batch in enumerate(r["batches"]):
            assert len(batch) == GLOBAL_BATCH // world
            steps.setdefault(r["first"] + j, []).extend(batch)
    return steps


@pytest.fixture(scope="module")
def packed(shared_demo):
    client, s = shared_demo
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=70_000)
    assert len(pack.shards) >= 4
    return str(client.store.root), s.id, pack.samples


def test_every_world_size_and_worker_count_makes_the_same_global_batches(packed, tmp_path):
    store, slice_id, samples = packed
    reference = _run(store, slice_id, tmp_path / "w1n0", 1, 0)
    assert sorted(reference) == list(range(-(-samples // GLOBAL_BATCH)))
    keys = [k for step in reference.values() for k in step]
    assert len(set(keys)) == samples  # every sample of the epoch, the padding repeating the first ones
    for world in (1, 2, 4):
        for workers in (0, 1, 2):
            if (world, workers) != (1, 0):
                assert _run(store, slice_id, tmp_path / f"w{world}n{workers}", world, workers) == reference, \
                    (world, workers)


def test_a_run_stopped_at_world_4_resumes_at_world_2_exactly(packed, tmp_path):
    store, slice_id, _ = packed
    reference = _run(store, slice_id, tmp_path / "ref", 2, 0)
    stopped = _run(store, slice_id, tmp_path / "stopped", 4, 2, stop_after=5)
    assert stopped == {k: reference[k] for k in range(5)}
    resumed = _run(store, slice_id, tmp_path / "resumed", 2, 1, resume=str(tmp_path / "stopped" / "state.json"))
    assert resumed == {k: v for k, v in reference.items() if k >= 5}  # nothing repeated, nothing skipped
