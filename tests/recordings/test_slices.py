"""Slices: content-hash ids, lookup, listing, collisions, clear errors."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from rayform import ArrayStream
from rayform.errors import InvalidInput, SliceNotFound


def _add(client, name, site="lab"):
    ts = np.arange(5, dtype=np.int64)
    return client.segments.add(site, name, [ArrayStream("x", ts, np.zeros((5, 1)))])


def test_create_get_and_list(client):
    a, b = _add(client, "a"), _add(client, "b")
    s = client.slices.create([a, b], name="two")
    assert re.fullmatch(r"slc_[0-9a-f]{8}", s.id)
    assert s.id == "slc_" + s.digest[:8]
    got = client.slices.get(s.id)
    assert got == s and [x.id for x in got.segments] == [a.id, b.id] and got.name == "two"
    assert [x.id for x in client.slices.list()] == [s.id]


def test_the_same_selection_gives_the_same_slice(client):
    a = _add(client, "a")
    assert client.slices.create([a]).id == client.slices.create([a.id]).id


def test_select_by_site_and_by_time_range(client):
    _add(client, "a")
    _add(client, "b")
    _add(client, "c", site="other")
    s = client.slices.create(site="lab")
    assert len(s.segments) == 2 and s.sites == ["lab"]
    ref = _add(client, "d")
    ranged = client.slices.create([{"id": ref.id, "start_ns": 1, "end_ns": 3}])
    assert (ranged.segments[0].start_ns, ranged.segments[0].end_ns) == (1, 3)
    with pytest.raises(InvalidInput, match="ends"):
        client.slices.create([{"id": ref.id, "start_ns": 3, "end_ns": 1}])


def test_an_unknown_slice_id_names_the_id_and_the_store(client):
    with pytest.raises(SliceNotFound) as e:
        client.slices.get("slc_deadbeef")
    assert "slc_deadbeef" in str(e.value) and str(client.store.root) in str(e.value)
    assert isinstance(e.value, KeyError)


def test_an_id_prefix_collision_takes_a_longer_id(client):
    a = _add(client, "a")
    s = client.slices.create([a])
    # Another slice already holds this 8-hex prefix: the new one must not take it.
    client.store.put_ref(f"refs/slices/{s.id}.json", {"id": s.id, "manifest": "0" * 64})
    again = client.slices.create([a])
    assert again.id == "slc_" + s.digest[:9]
    assert client.slices.get(again.id) == again


def test_a_slice_pickles_without_an_open_store(client):
    s = client.slices.create([_add(client, "a")])
    clone = pickle.loads(pickle.dumps(s))
    assert clone == s and clone.segment(0).id == s.segments[0].id


def test_an_empty_selection_is_refused(client):
    with pytest.raises(InvalidInput, match="at least one"):
        client.slices.create([])
    with pytest.raises(InvalidInput, match="no segments"):
        client.slices.create(site="nowhere")
