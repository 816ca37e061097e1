"""The streaming dataset's epoch and its state, read in one process with explicit topologies
(real ranks and workers: tests/integration/test_elastic.py)."""

from __future__ import annotations

import pytest

import rayform
from rayform.errors import InvalidInput
from rayform.torch.world import Split, World, nodes

G = 12


@pytest.fixture(scope="module")
def demo(shared_demo):
    client, s = shared_demo
    client.pack(s, 15, workers=1, progress=False, shard_bytes=70_000)
    return s


def _dataset(s, world: int, **kw):
    return rayform.torch.StreamingEpisodeDataset(s, obs=["joints/position"], action="joints/position", fps=15,
                                                 horizon=2, seed=4, batch_size=G // world,
                                                 split=kw.pop("split", Split(0, world, partitions=3)), **kw)


def _global(ds, world: int, workers: int) -> dict[int, list[str]]:
    steps: dict[int, list[str]] = {}
    for rank in range(world):
        for worker in range(max(1, workers)):
            for step, raws in ds.raw_steps(World(rank, world, worker, workers)):
                steps.setdefault(step, []).extend(raw["__key__"] for raw in raws)
    return dict(sorted(steps.items()))


def test_a_state_saved_at_one_topology_resumes_at_another(demo):
    reference = _global(_dataset(demo, 4), 4, 2)
    assert len({k for keys in reference.values() for k in keys}) == _dataset(demo, 4).plan(0).total
    state = _dataset(demo, 4).state_dict(step=7)
    assert state["global_batch"] == G and state["partitions"] == 3
    resumed = _dataset(demo, 2)
    resumed.load_state_dict(state)
    assert _global(resumed, 2, 3) == {k: v for k, v in reference.items() if k >= 7}


def test_a_dataset_without_partitions_takes_the_saved_ones(demo):
    saved = _dataset(demo, 2).state_dict(step=3)  # 3 partitions
    plain = _dataset(demo, 1, split=Split(0, 1))
    assert plain.partitions == 1
    plain.load_state_dict(saved)
    assert plain.partitions == 3
    expected = _global(_dataset(demo, 2), 2, 0)
    assert _global(plain, 1, 0) == {k: v for k, v in expected.items() if k >= 3}


@pytest.mark.parametrize(("change", "message"), [
    (dict(batch=8), "saved with global_batch 12, this dataset has 16"),
    (dict(split=Split(0, 2, partitions=5)), r"partitions 3, this dataset has 5. Make the dataset with Split\(partitions=3\)"),
    (dict(seed=9), "saved with seed 4"),
])
def test_a_state_of_another_run_is_one_error_saying_what_differs(demo, change, message):
    state = _dataset(demo, 2).state_dict(step=1)
    other = rayform.torch.StreamingEpisodeDataset(
        demo, obs=["joints/position"], action="joints/position", fps=15, horizon=2, seed=change.pop("seed", 4),
        batch_size=change.pop("batch", G // 2), split=change.pop("split", Split(0, 2, partitions=3)))
    with pytest.raises(InvalidInput, match=message):
        other.load_state_dict(state)


def test_a_state_names_its_epoch_order_and_another_order_is_refused(demo):
    """The epoch order may change between versions (windows ramp up since order 2, padding stays
    last since 3, in the last global batch only since 4, repeating samples from across the
    epoch since 5): a state says the order it was saved under, and one of another order is an
    error, not a resume that reads some samples twice and others never. Where the orders make
    the same epochs (no padding) such a state resumes."""
    ds = _dataset(demo, 2)
    state = ds.state_dict(step=1)
    assert state["order"] == 5
    with pytest.raises(InvalidInput, match="saved under epoch order 6, this rayform makes order 5"):
        _dataset(demo, 2).load_state_dict({**state, "order": 6})
    older = {k: v for k, v in state.items() if k != "order"}  # saved before it was named: order 2
    for old in (older, {**state, "order": 3}, {**state, "order": 4}):
        if ds.plan(0).padded:
            with pytest.raises(InvalidInput, match=f"saved under epoch order {old.get('order', 2)}"):
                _dataset(demo, 2).load_state_dict(old)
        else:
            _dataset(demo, 2).load_state_dict(old)
    drop = _dataset(demo, 2, split=Split(0, 2, partitions=3, equalize="drop"))
    assert not drop.plan(0).padded
    for order in (2, 3, 4):  # no padding: orders 2, 3 and 4 are order 5
        drop.load_state_dict({**drop.state_dict(step=1), "order": order})


def test_a_worker_state_loads_only_in_that_worker(demo):
    ds = _dataset(demo, 2)
    state = {"epoch": 0, "seed": 4, "partitions": 3, "global_batch": G, "step": 5, "worker": 1, "workers": 2,
             "order": 5}
    with pytest.raises(InvalidInput, match="a state of DataLoader worker 1 of 2, loaded in worker 0 of 1"):
        ds.load_state_dict(state)


def test_every_rank_yields_whole_global_batches(demo):
    for world in (1, 2, 3, 4):
        ds = _dataset(demo, world)
        n = ds.plan(0).total
        assert len(ds) == -(-n // G) * (G // world)  # padded to whole global batches, fewer than G repeated


def test_nodes_come_from_torchrun_s_variables():
    assert nodes({}) == 1
    assert nodes({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}) == 2
    assert nodes({"WORLD_SIZE": "4"}) == 1 and nodes({"WORLD_SIZE": "x", "LOCAL_WORLD_SIZE": "2"}) == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_partitions_are_one_error(bad):
    with pytest.raises(InvalidInput, match="partitions"):
        Split(partitions=bad)
