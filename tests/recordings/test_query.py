"""Slices by query: the language (checked before it runs), each operator over real catalog
rows, missing values, and a query over the same catalog making the same slice."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rayform
from rayform.errors import InvalidInput
from rayform.recordings import query


def _store(tmp_path) -> rayform.Client:
    client = rayform.Client(tmp_path / "store")
    made = []
    for i, (task, seconds, meta) in enumerate([
        ("pick the cube", 12.0, {"success": True, "robot": {"arm": "ur5"}, "tries": 1}),
        ("Pick the ball", 4.0, {"success": False, "robot": {"arm": "franka"}, "tries": 3}),
        ("place", 30.0, {"success": True, "tries": 2}),
        ("pick cube", 8.0, {}),
    ]):
        t = np.arange(int(seconds * 10) + 1, dtype=np.int64) * 100_000_000
        streams = [rayform.ArrayStream("joints", t, np.zeros((len(t), 2)))]
        if i % 2 == 0:
            streams.append(rayform.ImageStream("cam/depth", t, np.zeros((len(t), 2, 2), np.uint16)))
        made.append(("lab" if i < 3 else "other", f"ep{i}", streams, {"task": task, **meta}))
    client.segments.add_many(made)
    return client


CASES = {
    "task ~ 'pick'": ["ep0", "ep3"],
    "task ~ '(?i)pick' and duration > 5": ["ep0", "ep3"],
    "meta.success": ["ep0", "ep2"],
    "not meta.success": ["ep1", "ep3"],
    "meta.success == false": ["ep1"],
    "meta.robot.arm == 'ur5' or meta.tries >= 3": ["ep0", "ep1"],
    "meta.tries != 2": ["ep0", "ep1", "ep3"],  # a missing value is unequal to 2
    "meta.tries < 10": ["ep0", "ep1", "ep2"],  # and neither less nor more
    "has('cam/depth')": ["ep0", "ep2"],
    "'joints' in streams and not has('cam/depth')": ["ep1", "ep3"],
    "site == 'other'": ["ep3"],
    "duration >= 4 and duration <= 12": ["ep0", "ep1", "ep3"],
    "start == 0 and end > 29": ["ep2"],
    "(task ~ 'pick' or task ~ 'place') and meta.success": ["ep0", "ep2"],
    "name == \"ep1\"": ["ep1"],
}


def test_each_operator_selects_what_it_says(tmp_path):
    client = _store(tmp_path)
    table = client.segments.catalog.latest(columns=query.COLUMNS_READ)
    for text, want in CASES.items():
        got = sorted(query.select(table, text).column("name").to_pylist())
        assert got == want, text


@pytest.mark.parametrize(("text", "said"), [
    ("duration >", "ends where a value was expected"),
    ("durations > 3", "unknown field 'durations'"),
    ("task ~ 'x' and", "ends where a value was expected"),
    ("(duration > 3", r"expected '\)'"),
    ("duration > 3 3", "expected the end"),
    ("task ~ '('", "is not a regular expression"),
    ("duration ~ 3", "regular expression in quotes"),
    ("has(joints)", "unknown field 'joints'"),
    ("has(3)", r"expected has\('stream'\)"),
    ("duration @ 3", "cannot read"),
    ("", "an empty query"),
])
def test_a_bad_query_is_one_error_saying_where(tmp_path, text, said):
    client = _store(tmp_path)
    with pytest.raises(InvalidInput, match=said):
        client.slices.create(where=text)


def test_the_same_query_over_the_same_catalog_makes_the_same_slice(tmp_path):
    client = _store(tmp_path)
    a = client.slices.create(where="task ~ 'pick'", name="picks")
    b = rayform.Client(tmp_path / "store").slices.create(where="task ~ 'pick'", name="picks")
    assert a.id == b.id and [s.id for s in a.segments] == [s.id for s in b.segments]
    assert len(a.segments) == 2 and all(s.bundle for s in a.segments)
    lab = client.slices.create(site="lab", where="task ~ 'pick'")
    assert [s.site for s in lab.segments] == ["lab"]
    with pytest.raises(InvalidInput, match="selects none of the 4 segments"):
        client.slices.create(where="duration > 1000")
    with pytest.raises(InvalidInput, match="site 'nowhere': no segments"):
        client.slices.create(site="nowhere", where="duration > 1")


@given(st.text(max_size=40))
def test_any_text_is_a_query_or_one_invalid_input(text):
    try:
        query.parse(text)
    except InvalidInput:
        pass


def test_the_catalog_selects_the_latest_rows_a_query_picks_at_a_site(tmp_path, monkeypatch):
    """``Catalog.select``, what slices, ``segments ls`` and the view ask: the same rows as the
    query over the latest table, a site's only with ``site``, the columns asked and those the
    query reads; a bad query said before the catalog is read."""
    client = _store(tmp_path)
    catalog = client.segments.catalog
    table = catalog.latest(columns=query.COLUMNS_READ)
    for text, want in CASES.items():
        assert sorted(catalog.select(text).column("name").to_pylist()) == want, text
        at_lab = catalog.select(text, site="lab", columns=["flags"])
        assert sorted(at_lab.column("name").to_pylist()) == [n for n in want if n != "ep3"], text
        assert "flags" in at_lab.column_names and set(query.COLUMNS_READ) <= set(at_lab.column_names)
    assert catalog.select(columns=["name"]).num_rows == table.num_rows
    monkeypatch.setattr(type(catalog), "latest", lambda *a, **k: pytest.fail("read before the query was parsed"))
    with pytest.raises(InvalidInput, match="unknown field"):
        catalog.select("durations > 3")
