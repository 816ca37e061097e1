"""Partitioning an epoch: disjoint, covering, equal per rank, over a grid of topologies."""

from __future__ import annotations

from collections import Counter

import pytest

from rayform.read import partition


def _read(sizes, world, workers, epoch, equalize):
    per_rank = {}
    seen = Counter()
    for rank in range(world):
        n = 0
        for worker in range(workers):
            for run in partition.runs_for(sizes, rank, world, worker, workers, 7, epoch, equalize):
                assert 0 <= run.first < run.stop <= sizes[run.shard]
                for i in range(run.first, run.stop):
                    seen[(run.shard, i)] += 1
                n += len(run)
        per_rank[rank] = n
    return per_rank, seen


@pytest.mark.parametrize("sizes", [[10, 7, 13, 1, 9], [5], [3, 3], [100, 1, 1, 1]])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("epoch", [0, 1])
def test_every_sample_once_and_equal_counts(sizes, world, workers, epoch):
    total = sum(sizes)
    per_rank, seen = _read(sizes, world, workers, epoch, "pad")
    assert set(per_rank.values()) == {-(-total // world)}
    assert set(seen) == {(s, i) for s in range(len(sizes)) for i in range(sizes[s])}
    assert sum(seen.values()) - total == world * -(-total // world) - total  # only the padding repeats

    per_rank, seen = _read(sizes, world, workers, epoch, "drop")
    assert set(per_rank.values()) == {total // world}
    assert max(seen.values(), default=1) == 1 and sum(seen.values()) == world * (total // world)


def test_fewer_shards_than_readers_still_splits_the_samples():
    per_rank, seen = _read([12], world=2, workers=3, epoch=0, equalize="pad")
    assert per_rank == {0: 6, 1: 6} and len(seen) == 12


def test_shard_order_is_seeded_by_seed_and_epoch():
    assert list(partition.shard_order(20, 1, 0)) == list(partition.shard_order(20, 1, 0))
    assert list(partition.shard_order(20, 1, 0)) != list(partition.shard_order(20, 1, 1))
    assert sorted(partition.shard_order(20, 1, 3)) == list(range(20))


def test_worker_spans_tile_the_rank():
    spans = [partition.worker_span(10, 3, w) for w in range(3)]
    assert spans == [(0, 4), (4, 7), (7, 10)]
