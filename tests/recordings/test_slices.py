"""Slices: content-hash ids, lookup, listing, collisions, clear errors."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

import rayform
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


@pytest.mark.parametrize("segments", [2, 5], ids=["listed", "table"])
def test_a_slice_whose_blobs_were_taken_right_before_its_ref_is_written_again(client, monkeypatch, segments):
    """A gc that decided before the ref was written deletes the manifest (and segments table) it
    did not see reached: once the ref is there, the slice confirms them and writes them again."""
    from rayform.recordings import slices

    monkeypatch.setattr(slices, "TABLE_AT", 3)
    t = np.arange(5, dtype=np.int64) * 10**8
    refs = [client.segments.add("lab", f"e{i}", [rayform.ArrayStream("j", t, np.full((5, 1), i, np.float32))])
            for i in range(segments)]
    real = type(client.store).put_ref

    def taken(self, key, obj):
        if key.startswith("refs/slices/"):
            manifest = self.get_json_blob(obj["manifest"])
            for digest in [obj["manifest"], *([manifest["table"]] if "table" in manifest else [])]:
                self.blob_file(digest).unlink()
        return real(self, key, obj)

    monkeypatch.setattr(type(client.store), "put_ref", taken)
    made = client.slices.create(refs)
    monkeypatch.undo()
    again = rayform.Client(client.store.url).slices.get(made.id)
    assert [(x.id, x.version) for x in again.segments] == [(r.id, r.version) for r in refs]
    assert (again.table_blob is not None) == (segments >= 3)
