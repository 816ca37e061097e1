"""Splits: deterministic, segment-disjoint, stable when segments are added, shares honoured."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rayform.errors import InvalidInput
from rayform.recordings.splits import check_fractions, split_of

SHARES = {"train": 0.8, "val": 0.1, "test": 0.1}


def test_shares_are_honoured_over_many_segments():
    ids = [f"seg_{i:012x}" for i in range(20_000)]
    got = [split_of(s, SHARES, seed=3) for s in ids]
    for name, share in SHARES.items():
        assert abs(got.count(name) / len(ids) - share) < 0.01
    assert got != [split_of(s, SHARES, seed=4) for s in ids]  # the seed chooses


def test_a_segment_s_split_depends_on_its_id_and_the_seed_alone():
    ids = [f"seg_{i:012x}" for i in range(500)]
    before = {s: split_of(s, SHARES) for s in ids}
    more = ids + [f"seg_{i:012x}" for i in range(500, 900)]
    after = {s: split_of(s, SHARES) for s in more}
    assert all(after[s] == before[s] for s in ids)  # adding segments moves none
    code = ("from rayform.recordings.splits import split_of; "
            f"print([split_of(f'seg_{{i:012x}}', {SHARES!r}) for i in range(500)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(out) == [before[s] for s in ids]  # the same in a new process


@pytest.mark.parametrize("bad", [{}, {"train": 0.9}, {"train": 0.9, "val": 0.2}, {"train": 1.2, "val": -0.2},
                                 {"tr ain": 1.0}, {"train": float("nan")}, {"a": True}])
def test_bad_shares_are_one_error(bad):
    with pytest.raises(InvalidInput):
        check_fractions(bad)


def test_a_slice_splits_into_disjoint_children_that_cover_it(shared_demo):
    client, s = shared_demo
    halves = {"train": 0.5, "val": 0.5}
    seed = next(n for n in range(64) if len({split_of(seg.id, halves, n) for seg in s.segments}) == 2)
    children = client.slices.split(s, halves, seed=seed)
    assert set(children) == {"train", "val"}
    seen = [seg.id for child in children.values() for seg in child.segments]
    assert sorted(seen) == sorted(seg.id for seg in s.segments)
    assert children["train"].name == f"{s.name}-train"
    again = client.slices.split(s.id, halves, seed=seed)
    assert {k: v.id for k, v in again.items()} == {k: v.id for k, v in children.items()}


def test_a_split_that_gets_no_segment_is_one_error(shared_demo):
    client, s = shared_demo
    with pytest.raises(InvalidInput, match="split val .* got none of its 2 segments"):
        client.slices.split(s, {"train": 0.999999, "val": 0.000001})
