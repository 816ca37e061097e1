"""The segment list of ``rayform view``: filters, sorting and pages over the catalog, checked
against the same selection made in Python over what was stored."""

from __future__ import annotations

import numpy as np
import pytest

import rayform
from rayform.errors import InvalidInput
from rayform.recordings import health
from rayform.view import segment_table
from rayform.view.segment_table import Filter, SegmentTable

TASKS = ["pick the red cube", "Pick up the bottle", "open the drawer", ""]


def _segment(i: int, cameras: bool = True) -> tuple:
    seconds = 1 + (i * 7) % 11
    t = np.arange(0, seconds * 10 + 1, dtype=np.int64) * 100_000_000
    streams = [rayform.ArrayStream("joints", t, np.zeros((len(t), 2), np.float32))]
    if cameras:
        streams.append(rayform.ArrayStream("gripper", t, np.zeros((len(t), 1), np.float32)))
    return ("lab" if i % 3 else "field", f"ep-{i:03d}", streams,
            {"task": TASKS[i % 4], "success": i % 5 != 0, "operator": f"op{i % 2}"})


@pytest.fixture
def stored(client: rayform.Client) -> tuple[rayform.Client, list[dict]]:
    segments = [_segment(i) for i in range(40)]
    refs = client.segments.add_many(segments)
    rows = [{"id": r.id, "site": s[0], "name": s[1], "task": s[3]["task"], "success": s[3]["success"],
             "duration": (len(s[2][0].timestamps) - 1) / 10} for r, s in zip(refs, segments)]
    return client, rows


def _ids(table: SegmentTable, f: Filter) -> list[str]:
    page = table.page(f, 0, 500)
    assert page["total"] == len(page["rows"])
    return [r["id"] for r in page["rows"]]


def test_filters_select_what_python_selects(stored):
    client, rows = stored
    table = SegmentTable(client.segments.catalog)
    cases = [
        (Filter(), lambda r: True),
        (Filter(site="field"), lambda r: r["site"] == "field"),
        (Filter(task="PICK"), lambda r: "pick" in r["task"].lower()),
        (Filter(min_duration=4, max_duration=8), lambda r: 4 <= r["duration"] <= 8),
        (Filter(where="meta.success == false"), lambda r: not r["success"]),
        (Filter(site="lab", task="the", where="duration > 3"),
         lambda r: r["site"] == "lab" and "the" in r["task"] and r["duration"] > 3),
    ]
    for f, keep in cases:
        assert sorted(_ids(table, f)) == sorted(r["id"] for r in rows if keep(r)), f


def test_sorting_and_pages(stored):
    client, rows = stored
    table = SegmentTable(client.segments.catalog)
    by_duration = table.page(Filter(sort="duration", descending=True), 0, 500)["rows"]
    durations = [r["duration_s"] for r in by_duration]
    assert durations == sorted(durations, reverse=True) and len(durations) == len(rows)
    names = [r["name"] for r in table.page(Filter(sort="name"), 0, 500)["rows"]]
    assert names == sorted(r["name"] for r in rows)
    # pages of 7 cover the listing once, in its order
    paged = [r["id"] for offset in range(0, 40, 7) for r in table.page(Filter(sort="name"), offset, 7)["rows"]]
    assert paged == [r["id"] for r in table.page(Filter(sort="name"), 0, 500)["rows"]]
    assert table.page(Filter(), 1000, 10) == {"total": 40, "offset": 1000, "rows": [],
                                               "signals": list(health.KINDS)}
    # by a health signal: its value (0 where not measured), the worst first
    for kind in health.KINDS:
        listed = table.page(Filter(sort=f"health.{kind}", descending=True), 0, 500)["rows"]
        values = [r["signals"].get(kind, 0.0) for r in listed]
        assert values == sorted(values, reverse=True) and len(listed) == len(rows), kind
        ascending = [r["signals"].get(kind, 0.0) for r in table.page(Filter(sort=f"health.{kind}"), 0, 500)["rows"]]
        assert ascending == sorted(values)
    with pytest.raises(InvalidInput, match="sort 'health.nope'"):
        Filter(sort="health.nope")


def test_a_new_ingest_shows_on_the_next_look(stored, monkeypatch):
    client, rows = stored
    table = SegmentTable(client.segments.catalog)
    assert table.page(Filter(), 0, 1)["total"] == 40
    client.segments.add(*_segment(100))
    monkeypatch.setattr(segment_table, "CHECK_S", 0.0)
    assert table.page(Filter(), 0, 1)["total"] == 41
    expected = {site: sum(r["site"] == site for r in rows) for site in ("lab", "field")}
    expected["lab"] += 1  # ep-100 is at the lab
    assert {s["site"]: s["segments"] for s in table.sites()} == expected


def test_a_segment_lacking_its_sites_usual_stream_is_flagged_as_the_doctor_says(client):
    lab = [i for i in range(1, 17) if i % 3][:10]  # ten lab episodes with a gripper, one without
    field = [3, 6]  # the field's two: too few to say what it usually has
    client.segments.add_many([_segment(i) for i in lab + field] + [_segment(31, cameras=False),
                                                                    _segment(9, cameras=False)])
    rows = SegmentTable(client.segments.catalog).page(Filter(), 0, 50)["rows"]
    flagged = {r["name"]: r["missing"] for r in rows if r["missing"]}
    assert flagged == {"ep-031": ["gripper"]}
    [row] = [r for r in rows if r["name"] == "ep-031"]
    assert "missing_stream" in row["flags"]
    doctor = rayform.doctor(client, site="lab", progress=False)
    assert {(e.name, f["stream"]) for e in doctor.flagged for f in e.findings if f["kind"] == "missing_stream"} == {
        ("ep-031", "gripper")}


@pytest.mark.parametrize("bad", [dict(sort="size"), dict(where="duration >"), dict(where="nosuch == 1"),
                                 dict(task="x" * 401)])
def test_a_bad_filter_is_one_clear_error(bad):
    with pytest.raises(InvalidInput):
        Filter(**bad)


def test_a_bad_page_is_refused(stored):
    client, _ = stored
    table = SegmentTable(client.segments.catalog)
    for offset, limit in ((-1, 10), (0, 0), (0, 10_000)):
        with pytest.raises(InvalidInput):
            table.page(Filter(), offset, limit)


def test_the_flagged_filter_and_sort_and_each_rows_findings(client):
    t = np.arange(40, dtype=np.int64) * 100_000_000
    rng = np.random.default_rng(1)
    added = []
    for i in range(12):
        q = np.cumsum(rng.normal(0, 0.02, (40, 3)), axis=0)
        if i in (4, 9):
            q[20, 0] = 1e6
        added.append(("lab", f"ep-{i:02d}", [rayform.ArrayStream("q", t, q)], None))
    client.segments.add_many(added)
    table = SegmentTable(client.segments.catalog)
    page = table.page(Filter(flagged=True))
    assert page["total"] == 2 and {r["name"] for r in page["rows"]} == {"ep-04", "ep-09"}
    [finding] = page["rows"][0]["findings"]
    assert finding["kind"] == "spike" and finding["stream"] == "q" and finding["start_ns"] == int(t[20])
    first = table.page(Filter(sort="flags", descending=True), limit=2)["rows"]
    assert {r["name"] for r in first} == {"ep-04", "ep-09"} and all(r["flags"] == ["spike"] for r in first)
    row = first[0]
    assert table.findings(row["id"], row["version"]) == row["findings"]
