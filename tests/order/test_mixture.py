"""Weighted mixtures of slices: exact counts per epoch, an order that is a pure function of
(parts, weights, seed, epoch), the same through both datasets."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import InvalidInput, StreamNotFound
from rayform.order.mixture import MixtureOrder, counts

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

KW = dict(obs=["joints/position"], action="joints/position_delta", fps=15)


def test_counts_are_exact_and_sum_to_the_epoch():
    assert counts([100, 10], [0.7, 0.3]).tolist() == [77, 33]
    assert counts([5, 5, 5], [1, 1, 1]).tolist() == [5, 5, 5]
    assert counts([2, 1], [1, 1]).tolist() == [2, 1]  # a tied remainder to the earlier part
    assert counts([1, 1, 1, 1], [1, 1, 1, 0]).tolist() == [1, 1, 1, 0]  # weight 0: out of the epoch, N = 3
    assert int(counts([999, 1], [0.123, 0.877]).sum()) == 1000
    for bad in ([], [0, 0], [-1, 2], [float("nan"), 1]):
        with pytest.raises(InvalidInput, match="mixture weights"):
            counts([1] * max(1, len(bad)), bad)


def test_a_small_part_repeats_and_a_large_one_is_sampled_without_replacement():
    order = MixtureOrder([1000, 20], [0.5, 0.5], seed=3, epoch=1)
    parts, ids = order.lookup(np.arange(order.total))
    assert Counter(parts.tolist()) == {0: 510, 1: 510}
    big = ids[parts == 0]
    assert len(set(big.tolist())) == 510  # no sample twice
    small = Counter(ids[parts == 1].tolist())
    assert set(small) == set(range(20)) and set(small.values()) == {25, 26}  # 510 = 25·20 + 10
    again = MixtureOrder([1000, 20], [0.5, 0.5], seed=3, epoch=2)
    assert not np.array_equal(again.lookup(np.arange(order.total))[1], ids)


def test_a_slot_ranks_among_its_part_s_slots_in_slot_order():
    order = MixtureOrder([9000, 500, 40], [0.6, 0.3, 0.1], seed=0, epoch=0)  # more slots than one table chunk
    parts = order.parts_of(np.arange(order.total))
    expected = np.zeros(order.total, np.int64)
    for p in range(3):
        expected[parts == p] = np.arange(int((parts == p).sum()))
    some = np.array([order.total - 1, 0, 4096, 4095, 8191, 77, 5000])
    got_parts, got_ranks = order.ranks(some)
    assert got_parts.tolist() == parts[some].tolist() and got_ranks.tolist() == expected[some].tolist()
    assert order.ranks(np.arange(order.total))[1].tolist() == expected.tolist()


def test_the_order_is_the_same_in_a_new_process():
    code = ("import numpy as np; from rayform.order.mixture import MixtureOrder; "
            "o = MixtureOrder([40, 7], [0.3, 0.7], 5, 2); print(o.lookup(np.arange(o.total))[1].tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    o = MixtureOrder([40, 7], [0.3, 0.7], 5, 2)
    assert eval(out) == o.lookup(np.arange(o.total))[1].tolist()


@pytest.fixture(scope="module")
def two_slices(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("mixture") / "store")
    big = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=4, seconds=6.0, seed=1, image_size=16),
                                           progress=False), name="big")
    small = client.slices.create(ingest_demo(client, "field", DemoConfig(episodes=1, seconds=3.0, seed=2,
                                                                         image_size=16), progress=False), name="small")
    for s in (big, small):
        client.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16)
    return client, big, small


def _parts(batches) -> Counter:
    return Counter(p for b in batches for p in b["meta"]["part"].tolist())


def test_the_map_style_dataset_draws_exact_counts_from_each_part(two_slices):
    client, big, small = two_slices
    ds = rayform.torch.EpisodeDataset([(big, 0.8), (small, 0.2)], **KW)
    expected = counts([big_n := ds.builders[0].pack.samples, ds.builders[1].pack.samples], [0.8, 0.2]).tolist()
    assert len(ds) == big_n + ds.builders[1].pack.samples
    seen = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        batches = list(DataLoader(ds, batch_size=32, num_workers=2))
        assert _parts(batches) == {0: expected[0], 1: expected[1]}
        seen.append([int(t) for b in batches for t in b["t_ns"]])
    assert seen[0] != seen[1]
    sample = ds[0]
    assert sample["meta"]["part"] in (0, 1) and sample["meta"]["slice"] == (big.id, small.id)[sample["meta"]["part"]]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_streaming_dataset_draws_the_same_counts(two_slices, workers):
    client, big, small = two_slices
    ds = rayform.torch.StreamingEpisodeDataset([(big, 0.8), (small, 0.2)], **KW, batch_size=4)
    expected = counts([b.pack.samples for b in ds.builders], [0.8, 0.2]).tolist()
    assert sum(expected) % 4 == 0  # no padding: the epoch is whole global batches
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        batches = list(DataLoader(ds, batch_size=None, num_workers=workers))
        assert _parts(batches) == {0: expected[0], 1: expected[1]}
        for b in batches:
            for p, slice_id in zip(b["meta"]["part"].tolist(), b["meta"]["slice"]):
                assert slice_id == (big.id, small.id)[p]


def test_a_stream_missing_in_one_part_is_an_error_naming_the_part(two_slices, tmp_path):
    client, big, small = two_slices
    other = rayform.Client(tmp_path / "other")
    refs = ingest_demo(other, "lab", DemoConfig(episodes=1, seconds=2.0, seed=3, image_size=16), progress=False)
    bare = other.slices.create(refs, name="bare")
    other.pack(bare, 15, workers=1, progress=False, streams=["cam0/rgb", "joints/position"])
    with pytest.raises(StreamNotFound, match=f"mixture part 1: {bare.id}: no stream 'ee/pose'"):
        rayform.torch.EpisodeDataset([(big, 1), (bare, 1)], obs=["ee/pose"], fps=15)
    with pytest.raises(InvalidInput, match="mixture part 1"):
        rayform.torch.StreamingEpisodeDataset([(big, 1), ("slc_x", 1)], **KW)


@pytest.mark.parametrize("dataset", ["EpisodeDataset", "StreamingEpisodeDataset"])
def test_a_part_of_weight_zero_is_left_out_of_the_epoch(two_slices, dataset):
    """Its samples neither appear nor count: the other part gives its own size, once each."""
    client, big, small = two_slices
    ds = getattr(rayform.torch, dataset)([(big, 1.0), (small, 0.0)], **KW)
    n = ds.builders[0].pack.samples
    assert len(ds) == n
    keys = [(s["meta"]["part"], s["meta"]["segment"], int(s["t_ns"])) for s in
            (ds[i] for i in range(len(ds)))] if dataset == "EpisodeDataset" else \
        [(s["meta"]["part"], s["meta"]["segment"], int(s["t_ns"])) for s in ds]
    assert {k[0] for k in keys} == {0} and len(set(keys)) == len(keys) == n  # none of the other part, none twice
    assert counts([n, ds.builders[1].pack.samples], [1.0, 0.0]).tolist() == [n, 0]
