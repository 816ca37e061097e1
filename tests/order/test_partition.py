"""The epoch's global batches: a pure function of (size, global batch, partitions, seed,
epoch) that every world size and worker count reads the same way."""

from __future__ import annotations

import numpy as np
import pytest

from rayform.errors import InvalidInput
from rayform.order import partition
from rayform.order.partition import EpochPlan


def _global(plan: EpochPlan) -> np.ndarray:
    return plan.positions(range(plan.steps), 0, plan.global_batch).reshape(plan.steps, plan.global_batch)


def _by_readers(plan: EpochPlan, world: int, workers: int, first: int = 0) -> dict[int, list[int]]:
    """Each step's global batch as the readers of one topology make it, ranks in rank order."""
    batch = plan.global_batch // world
    out: dict[int, list[int]] = {}
    for rank in range(world):
        for worker in range(max(1, workers)):
            steps = partition.reader_steps(plan.steps, first, worker, workers)
            got = plan.positions(steps, *partition.rank_slots(rank, batch)).reshape(len(steps), batch)
            for k, row in zip(steps, got.tolist()):
                out.setdefault(k, []).extend(row)  # ranks run in order, so rank r's slots come r-th
    return out


@pytest.mark.parametrize("total", [1000, 999, 37])
@pytest.mark.parametrize(("global_batch", "partitions"), [(16, 8), (16, 3), (12, 16), (1, 8)])
def test_an_epoch_reads_every_position_once_and_pads_less_than_one_global_batch(total, global_batch, partitions):
    plan = EpochPlan(total, global_batch, partitions, window=50, seed=1, epoch=2)
    seen = _global(plan).ravel()
    assert sorted(seen.tolist()) == list(range(plan.steps * global_batch))
    assert 0 <= plan.steps * global_batch - total < global_batch
    drop = EpochPlan(total, global_batch, partitions, window=50, seed=1, epoch=2, equalize="drop")
    assert drop.steps == total // global_batch


@pytest.mark.parametrize("world", [1, 2, 4, 8, 3])
@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_the_global_batches_are_the_same_at_every_world_size_and_worker_count(world, workers):
    g = 24
    plan = EpochPlan(1000, g, 8, window=64, seed=5, epoch=1)
    expected = _global(plan)
    got = _by_readers(plan, world, workers)
    assert sorted(got) == list(range(plan.steps))
    assert all(got[k] == expected[k].tolist() for k in got)


@pytest.mark.parametrize(("world", "workers"), [(4, 2), (2, 0), (1, 3), (8, 1)])
def test_a_run_stopped_at_step_k_resumes_there_at_any_topology(world, workers):
    plan = EpochPlan(1000, 16, 8, window=64, seed=5, epoch=1)
    expected = _global(plan)
    got = _by_readers(plan, world, workers, first=23)
    assert sorted(got) == list(range(23, plan.steps))
    assert all(got[k] == expected[k].tolist() for k in got)


def test_a_rank_reads_only_the_partitions_its_slots_fall_in():
    total, g, parts = 4000, 32, 8
    plan = EpochPlan(total, g, parts, window=100, seed=0, epoch=0)
    stretch = plan.steps * g // parts  # each partition owns one consecutive stretch of positions
    for world in (2, 4, 8, 16):
        for rank in range(world):
            mine = plan.positions(range(plan.steps), *partition.rank_slots(rank, g // world))
            owners = set((mine // stretch).tolist())
            assert len(owners) == max(1, parts // world), (world, rank, owners)


def test_windows_permute_within_a_partition_and_change_with_the_epoch():
    a = EpochPlan(800, 8, 2, window=100, seed=3, epoch=0)
    b = EpochPlan(800, 8, 2, window=100, seed=3, epoch=1)
    plain = EpochPlan(800, 8, 2, window=0, seed=3, epoch=0)
    # partition 0 gives slots 0..3 (b = 4 a step): windows ramp up 4, 8, 16, 32, 64 positions (steps
    # 0, 1-2, 3-6, 7-14, 15-30), then 100 each (25 steps)
    windows = [(range(0, 1), 4), (range(1, 3), 8), (range(3, 7), 16), (range(7, 15), 32), (range(15, 31), 64),
               (range(31, 56), 100), (range(56, 81), 100)]
    start = 0
    for steps, size in windows:
        got = a.positions(steps, 0, 4).tolist()
        assert sorted(got) == list(range(start, start + size)), (steps, size)
        if size >= 16:  # permuted (a small window may come out in order by chance)
            assert got != list(range(start, start + size))
        start += size
    first = a.positions(range(81), 0, 4)
    assert first.tolist() != b.positions(range(81), 0, 4).tolist()
    assert plain.positions(range(25), 0, 4).tolist() == list(range(100))
    assert a.positions(range(81), 0, 4).tolist() == first.tolist()  # the same seed and epoch: the same order


def test_the_first_global_batch_reads_the_first_positions_of_every_partition():
    """However large the window, a stream starts on the first samples of its partitions."""
    plan = EpochPlan(100_000, 64, 4, window=1000, seed=7, epoch=3)
    first = plan.positions([0], 0, 64)
    assert sorted(first.tolist()) == [int(plan.starts[c]) + i for c in range(4) for i in range(16)]


def test_shard_order_is_seeded_by_seed_and_epoch():
    assert list(partition.shard_order(20, 1, 0)) == list(partition.shard_order(20, 1, 0))
    assert list(partition.shard_order(20, 1, 0)) != list(partition.shard_order(20, 1, 1))
    assert sorted(partition.shard_order(20, 1, 3)) == list(range(20))


@pytest.mark.parametrize("bad", [dict(global_batch=0), dict(partitions=0), dict(window=-1), dict(equalize="trim")])
def test_bad_plans_are_one_error(bad):
    args = dict(total=10, global_batch=4, partitions=2, window=3, seed=0, epoch=0) | bad
    with pytest.raises(InvalidInput):
        EpochPlan(**args)


@pytest.mark.parametrize("window", [0, 64, 1000])
@pytest.mark.parametrize("total", [1000, 1001, 1063, 5000 - 1])
def test_padding_repeats_only_in_the_last_global_batch_with_one_partition(window, total):
    """equalize="pad": the positions past the epoch's samples stay at the end of their
    partition whatever the window, so with one partition every repeat is in the last global
    batch; each is one of the epoch's first positions (wrapped)."""
    plan = EpochPlan(total, 64, 1, window, seed=3, epoch=1)
    rows = _global(plan)
    padded = rows >= total
    assert plan.padded == int(padded.sum()) == plan.steps * 64 - total
    assert not padded[:-1].any()  # nothing repeats before the last global batch
    assert sorted(rows[~padded].tolist()) == list(range(total))  # every sample once besides


def test_with_several_partitions_padding_is_in_the_last_slots_of_the_last_global_batch_only():
    """The reproduction of the crash (a reader's steps asking only for the padding of a window
    that still holds samples), and padding that spilled into the batches before the last."""
    plan = EpochPlan(258, 8, 2, 1000, 0, 0, "pad")
    assert plan.positions([32], 0, 8).tolist()[2:] == list(range(258, 264))
    plan = EpochPlan(1000, 64, 4, 1000, seed=3, epoch=0)  # 24 pads, a partition's share of a batch is 16
    rows = _global(plan)
    padded = rows >= 1000
    assert plan.padded == 24 and int(padded.sum()) == 24
    assert not padded[:-1].any() and padded[-1, 64 - 24:].all()
    assert sorted(rows[~padded].tolist()) == list(range(1000))
