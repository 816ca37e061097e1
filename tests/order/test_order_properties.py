"""The epoch order as properties over random configurations (not only the ones we thought of):
packs of any shards, mixtures with weights (0 included), any batch, world size, workers,
partitions and window, "pad" or "drop", video lanes with any clip stride. Every epoch covers
every sample exactly once (plus exactly the documented padding, in the last global batch);
no rank is short; nothing raises; a run resumed from any step at another topology makes the
same global batches."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rayform.order import partition
from rayform.order.epoch import EpochOrder
from rayform.order.mixture import counts
from rayform.order.partition import EpochPlan


@st.composite
def configurations(draw):
    parts = draw(st.integers(1, 3))
    shards = [draw(st.lists(st.integers(1, 40), min_size=1, max_size=6)) for _ in range(parts)]
    weights = None
    if parts > 1:
        weights = draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0, 3.0]), min_size=parts, max_size=parts)
                       .filter(lambda w: sum(w) > 0))
    world = draw(st.integers(1, 5))
    return dict(
        shards=shards, weights=weights, world=world, batch=draw(st.integers(1, 12)),
        workers=draw(st.integers(0, 3)), partitions=draw(st.integers(1, 8)),
        window=draw(st.sampled_from([0, 1, 2, 7, 50, 300])), equalize=draw(st.sampled_from(["pad", "drop"])),
        lanes=draw(st.none() | st.tuples(st.integers(1, 4), st.integers(1, 8), st.integers(0, 8))
                   .map(lambda t: (t[0], t[1] * max(1, t[2]), t[2]))),  # (clip stride, lane run, clip)
        seed=draw(st.integers(0, 2**32)), epoch=draw(st.integers(0, 5)),
        # where a resumed run starts, and on which topology (same global batch)
        resume=draw(st.floats(0, 1)), world2=draw(st.sampled_from([1, 2, 3, 4, 6])), workers2=draw(st.integers(0, 3)),
    )


def _readers(plan: EpochPlan, world: int, workers: int, first: int = 0) -> dict[int, list[int]]:
    """Each step's global batch as the readers of one topology make it, ranks in rank order;
    every reader's own rows checked to be whole (no rank is short)."""
    batch = plan.global_batch // world
    out: dict[int, list[int]] = {}
    per_rank = Counter()
    for rank in range(world):
        for worker in range(max(1, workers)):
            steps = partition.reader_steps(plan.steps, first, worker, workers)
            got = plan.positions(steps, *partition.rank_slots(rank, batch))
            assert got.shape == (len(steps) * batch,)
            per_rank[rank] += len(steps)
            for k, row in zip(steps, got.reshape(len(steps), batch).tolist()):
                out.setdefault(k, []).extend(row)
    assert set(per_rank.values()) <= {plan.steps - first}, per_rank  # every rank makes every step
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configurations())
def test_every_epoch_covers_every_sample_once_plus_exactly_the_padding(c):
    order = EpochOrder(c["shards"], c["weights"], c["seed"], c["epoch"])
    total = order.total
    g = c["batch"] * c["world"]
    plan = EpochPlan(total, g, c["partitions"], c["window"], c["seed"], c["epoch"], c["equalize"], c["lanes"])
    by_step = _readers(plan, c["world"], c["workers"])
    assert sorted(by_step) == list(range(plan.steps))
    rows = np.array([by_step[k] for k in range(plan.steps)], np.int64).reshape(plan.steps, g)
    positions = rows.ravel()
    if c["equalize"] == "pad":
        assert plan.steps == -(-total // g)
        padding = positions >= total
        # exactly the documented padding: the last slots of the last global batch, repeating the
        # epoch's first positions
        assert int(padding.sum()) == plan.padded == plan.steps * g - total < g
        assert not padding.reshape(rows.shape)[:-1].any()
        assert padding.reshape(rows.shape)[-1, g - plan.padded:].all()
        assert sorted(positions[~padding].tolist()) == list(range(total))
        assert sorted((positions[padding] - total).tolist()) == list(range(plan.padded))
    else:
        assert plan.steps == total // g
        assert len(set(positions.tolist())) == len(positions) == plan.steps * g and positions.max(initial=-1) < total
    # positions to samples: every part gives its count, each of its samples as evenly as that allows
    parts, ids = order.samples(positions[positions < total] if c["equalize"] == "pad" else np.arange(total))
    sizes = [sum(s) for s in c["shards"]]
    want = counts(sizes, c["weights"]) if c["weights"] is not None else np.array(sizes)
    for p, size in enumerate(sizes):
        mine = ids[parts == p]
        assert len(mine) == want[p]
        assert mine.min(initial=0) >= 0 and mine.max(initial=0) < size
        if len(mine):
            seen = np.bincount(mine, minlength=size)
            assert seen.max() - seen.min() <= 1 if want[p] >= size else seen.max() == 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configurations())
def test_a_run_resumed_at_any_step_on_another_topology_makes_the_same_global_batches(c):
    total = EpochOrder(c["shards"], c["weights"], c["seed"], c["epoch"]).total
    g = c["batch"] * c["world"] * c["world2"]  # a global batch both topologies divide
    plan = EpochPlan(total, g, c["partitions"], c["window"], c["seed"], c["epoch"], c["equalize"], c["lanes"])
    first = int(c["resume"] * plan.steps)
    before = _readers(plan, c["world"] * c["world2"], c["workers"])
    again = EpochPlan(total, g, c["partitions"], c["window"], c["seed"], c["epoch"], c["equalize"], c["lanes"])
    after = _readers(again, c["world2"], c["workers2"], first=first)
    assert sorted(after) == list(range(first, plan.steps))
    assert all(after[k] == before[k] for k in after)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(400, 3000), st.integers(4, 32), st.integers(1, 4), st.integers(1, 8), st.integers(1, 3),
       st.integers(0, 1000))
def test_a_video_packs_batches_are_made_of_other_clips_every_epoch(total, batch, stride, clip, partitions, seed):
    """Any pack, one shard or many (the epoch order is the file order of one shard, the worst
    case): the global batches of epoch 1 are not those of epoch 0 shuffled among slots."""
    lanes = (stride, 8 * clip, clip)

    def batches(epoch: int) -> set[frozenset[int]]:
        plan = EpochPlan(total, batch, partitions, 1000, seed, epoch, "drop", lanes)
        rows = plan.positions(range(plan.steps), 0, batch).reshape(plan.steps, batch)
        return {frozenset(r.tolist()) for r in rows}

    a, b = batches(0), batches(1)
    assert len(a & b) <= len(a) // 2


@settings(max_examples=80, deadline=None)
@given(st.integers(40, 3000), st.integers(1, 40), st.integers(0, 2**31), st.integers(0, 50))
def test_padding_repeats_samples_from_across_the_epoch_another_each_seed_and_epoch(total, pads, seed, epoch):
    """A padded last batch repeats samples drawn from the whole epoch by seed and epoch; with a
    pack of one shard, its first samples were the pads of every epoch (order 4)."""
    from rayform.order.epoch import EpochOrder

    def padding(s, e):
        return EpochOrder([[total]], None, s, e).samples(np.arange(total, total + pads))[1]

    mine = padding(seed, epoch)
    assert ((mine >= 0) & (mine < total)).all() and len(set(mine.tolist())) == min(pads, total)
    assert (mine == padding(seed, epoch)).all()  # a function of seed and epoch
    others = [padding(seed + 1, epoch), padding(seed, epoch + 1)]
    if pads >= 16 and total >= 20 * pads:  # two random draws share about pads²/total
        assert all(len(set(mine.tolist()) & set(o.tolist())) <= pads // 2 for o in others)
        assert np.median(mine) > total / 16  # not the epoch's first samples


def test_a_one_shard_pack_pads_with_other_samples_each_epoch():
    from rayform.order.epoch import EpochOrder

    first = EpochOrder([[720]], None, 0, 0).samples(np.arange(720, 768))[1]
    later = EpochOrder([[720]], None, 1, 2).samples(np.arange(720, 768))[1]
    assert len(set(first.tolist()) & set(later.tolist())) <= 12 and len(set(first.tolist())) == 48
