"""Lanes: a video pack's window permutation, a bijection in which a clip's samples keep one
slot, ``stride`` global batches apart, and every batch draws on as many runs as it has slots."""

from __future__ import annotations

import numpy as np
import pytest

from rayform.order.lanes import LanePermutation
from rayform.order.partition import EpochPlan


@pytest.mark.parametrize("n, b, stride", [(1024, 64, 2), (100, 8, 2), (37, 5, 3), (7, 8, 2), (64, 4, 1), (96, 8, 4)])
@pytest.mark.parametrize("clip", [0, 1, 4, 7])
def test_a_window_is_permuted_one_to_one(n, b, stride, clip):
    out = LanePermutation(n, b, stride, seed=1, epoch=0, key=5, clip=clip)(np.arange(n))
    assert sorted(out.tolist()) == list(range(n))


@pytest.mark.parametrize("clip", [0, 4])
def test_a_lane_reads_whole_clips_in_one_slot_stride_batches_apart(clip):
    b, stride, rows = 8, 2, 16
    out = LanePermutation(b * rows, b, stride, seed=3, epoch=1, key=0, clip=clip)(np.arange(b * rows)).reshape(rows, b)
    for g in range(stride):
        for slot in range(b):
            run = out[g::stride, slot]
            steps = np.diff(run)
            # the next sample each time its batch comes round, but where a clip ends: the lane
            # goes on with the next clip of its run (seeded), from that clip's first sample
            assert np.all((steps == 1) | ((run[1:] % clip == 0) if clip else False)), run
            if clip:
                assert np.all(run[np.flatnonzero(steps != 1) + 1] % clip == 0)
    assert all(len(set((row // (rows // stride)).tolist())) == b for row in out) or clip  # b runs in every batch


def test_lanes_change_with_the_epoch():
    a = LanePermutation(512, 16, 2, seed=3, epoch=0, key=0)(np.arange(512))
    b = LanePermutation(512, 16, 2, seed=3, epoch=1, key=0)(np.arange(512))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("change", ["epoch", "seed"])
def test_which_clips_make_a_batch_changes_with_the_epoch_and_the_seed(change):
    """Not only which slot a run lands in: the batches are made of other clips. (A pack of one
    shard, read in file order, made the same batches every epoch and seed before.)"""
    n, b, stride, clip = 512, 16, 2, 8
    first = LanePermutation(n, b, stride, seed=3, epoch=0, key=0, clip=clip)(np.arange(n)).reshape(-1, b)
    kw = {"seed": 3, "epoch": 1} if change == "epoch" else {"seed": 4, "epoch": 0}
    other = LanePermutation(n, b, stride, key=0, clip=clip, **kw)(np.arange(n)).reshape(-1, b)
    batches = {frozenset(row.tolist()) for row in first}
    assert len(batches & {frozenset(row.tolist()) for row in other}) < len(batches) // 4


def test_an_epoch_plan_in_lanes_reads_every_sample_once_the_same_at_any_topology():
    total, batch = 1000, 24
    plan = EpochPlan(total, batch, partitions=2, window=1000, seed=7, epoch=0, lanes=(2, 32))
    whole = plan.positions(range(plan.steps), 0, batch)
    real = whole[whole < total]
    assert sorted(real.tolist()) == list(range(total))  # the last batch padded with repeats
    halves = np.concatenate([plan.positions(range(plan.steps), 0, 12).reshape(plan.steps, 12),
                             plan.positions(range(plan.steps), 12, 24).reshape(plan.steps, 12)], axis=1)
    assert np.array_equal(halves.ravel(), whole)
    # each partition here is one window: every slot reads, every other batch, one run of
    # consecutive samples (a few clips, one after another), ``stride`` batches apart (the last
    # batch, partly padding, stays in place)
    grid = whole.reshape(plan.steps, batch)[:-1]
    for slot in range(batch):
        for g in range(2):
            run = grid[g::2, slot]
            run = run[run < total]
            assert np.all(np.diff(run) == 1), (slot, g)


def test_without_shuffle_there_are_no_lanes():
    plan = EpochPlan(100, 10, partitions=1, window=0, seed=1, epoch=0, lanes=(2, 32))
    assert plan.positions(range(plan.steps), 0, 10).tolist() == list(range(100))
