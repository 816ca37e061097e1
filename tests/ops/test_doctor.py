"""Episode health: a store of demo episodes with planted defects of every kind; `rayform doctor`
flags each planted one, naming the kind and the time, and none of the clean ones; the flags are
queried with --where and excluded from slices; the LeRobot example's constant streams are found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from planted import KINDS, plant, rewrite_catalog_parts, without_health

import rayform
from rayform.converters.demo import DemoConfig, demo_episode

CLEAN = 60
CONFIG = DemoConfig(episodes=CLEAN, seconds=3.0, seed=3, image_size=32)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("doctor") / "store")
    batch, where = [], {}
    for e in range(CLEAN):
        name, streams, meta = demo_episode(CONFIG, e)
        batch.append(("lab", name, streams, meta))
    for k, kind in enumerate(KINDS):
        name, streams, meta = demo_episode(CONFIG, CLEAN + k)
        streams, at = plant(kind, streams)
        batch.append(("lab", f"planted_{kind}", streams, meta))
        where[f"planted_{kind}"] = (kind, at)
    client.segments.add_many(batch)
    return client, where


def _doctor(store, *args):
    env = {**os.environ, "RAYFORM_STORE": str(store)}
    return subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "doctor", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_doctor_flags_every_planted_episode_with_its_kind_and_time_and_no_clean_one(planted):
    client, where = planted
    r = _doctor(client.store.root, "--json")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    found = {f["name"]: f["findings"] for f in report["findings"]}
    assert set(found) == set(where), sorted(set(found) ^ set(where))  # every planted one, no clean one
    for name, (kind, at) in where.items():
        mine = [f for f in found[name] if f["kind"] == kind]
        assert mine, (name, found[name])
        if kind not in ("constant", "missing_stream", "duration"):
            seg = client.segments.get(next(s.id for s in client.segments.list() if s.name == name))
            start = min(int(seg.timestamps(n)[0]) for n in seg.streams)
            first = min(int(seg.timestamps(mine[0]["stream"])[0]), start)
            assert abs((mine[0]["start_ns"] - int(seg.timestamps(mine[0]["stream"])[0])) / 1e9 - at) < 0.05, \
                (name, mine[0], at, first)
    text = _doctor(client.store.root)
    assert text.returncode == 1 and f"{len(where)} flagged episodes of {CLEAN + len(where)}" in text.stdout
    assert "spike joints/position at" in text.stdout and "frozen cam0/rgb" in text.stdout


def test_flags_are_queried_and_kept_out_of_a_slice(planted):
    client, where = planted
    clean = client.slices.create(where="not flagged", name="clean")
    names = {client.segments.get(s.id).name for s in clean.segments}
    assert not names & {n for n, (k, _) in where.items() if k not in ("missing_stream", "duration")}
    # the slice keeps what only the population shows: doctor over it finds those two
    report = json.loads(_doctor(client.store.root, "clean", "--json").stdout)
    assert {f["name"] for f in report["findings"]} == {"planted_missing_stream", "planted_duration"}
    assert report["episodes"] == len(clean.segments) == CLEAN + 2
    spiked = client.slices.create(where="'spike' in flags and health.spike > 1000", name="spiked")
    assert [client.segments.get(s.id).name for s in spiked.segments] == ["planted_spike"]
    frozen = client.slices.create(where="health.frozen > 1", name="frozen")
    assert [client.segments.get(s.id).name for s in frozen.segments] == ["planted_frozen"]
    env = {**os.environ, "RAYFORM_STORE": str(client.store.root)}
    ls = subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "segments", "ls", "--flagged", "--json"],
                        capture_output=True, text=True, env=env, timeout=300)
    listed = json.loads(ls.stdout)
    assert all(row["flags"] for row in listed) and len(listed) == len(where) - 2  # the population's are doctor's


def test_a_catalog_from_before_health_signals_is_measured_by_doctor(planted, tmp_path):
    """Rows without signals (parts written before them): doctor reads and measures the segments."""
    client, where = planted
    root = tmp_path / "old"
    import shutil
    shutil.copytree(client.store.root, root)
    old = rayform.Client(root)
    without_health(old)
    from rayform.errors import InvalidInput

    with pytest.raises(InvalidInput, match="selects none"):  # nothing measured: nothing flagged
        old.slices.create(where="flagged", name="none_known")
    r = _doctor(root, "--json")  # 70 to measure: a pool of the machine's cores
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["measured_now"] == CLEAN + len(where)
    assert {f["name"] for f in report["findings"]} == set(where)
    assert json.loads(_doctor(root, "--json", "--workers", "1").stdout) == report  # one process: the same


def test_the_lerobot_examples_constant_state_and_action_are_flagged(tmp_path):
    source = Path(__file__).resolve().parents[1] / "data" / "lerobot" / "so101_v30"  # its copy, in every clone
    client = rayform.Client(tmp_path / "store")
    client.ingest("lerobot", [source], "so101", workers=1, progress=False)
    r = _doctor(tmp_path / "store", "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["flagged"] == 6
    for episode in report["findings"]:
        assert {(f["kind"], f["stream"]) for f in episode["findings"]} == {("constant", "observation/state"),
                                                                           ("constant", "action/value")}


def test_thresholds_given_to_doctor_and_each_sites_own(planted, tmp_path):
    client, where = planted
    lower = json.loads(_doctor(client.store.root, "--json", "--threshold", "dropped=0.0125").stdout)
    named = {f["name"] for f in lower["findings"]}
    assert set(where) < named  # the demo's clean cameras drop a frame now and then
    assert all(any(x["kind"] == "dropped" for x in f["findings"]) for f in lower["findings"] if f["name"] not in where)
    own = tmp_path / "sites.json"
    own.write_text(json.dumps({"lab": {"constant": 100, "spike": 1e30}}))
    higher = json.loads(_doctor(client.store.root, "--json", "--site-thresholds", str(own)).stdout)
    assert {f["name"] for f in higher["findings"]} == set(where) - {"planted_constant", "planted_spike"}
    for bad in ("nosuch=3", "dropped=0.001"):  # no such signal; under what the catalog keeps findings from
        said = _doctor(client.store.root, "--threshold", bad)
        assert said.returncode == 2 and bad in said.stderr and len(said.stderr.strip().splitlines()) == 1
    both = _doctor(client.store.root, "anyslice", "--site", "lab")  # a slice or a site, not both
    assert both.returncode == 2 and "not both" in both.stderr and len(both.stderr.strip().splitlines()) == 1


def test_rows_that_do_not_know_their_length_or_streams_are_neither_counted_nor_judged():
    """Rows of per-segment refs (stores from before catalogs) have no duration and no streams."""
    import pyarrow as pa

    from rayform.recordings.population import population

    known = 10
    table = pa.table({
        "site": ["lab"] * (known + 3), "task": ["t"] * (known + 3),
        "duration_s": pa.array([10.0 + 0.1 * i for i in range(known)] + [None] * 2 + [0.5], pa.float64()),
        "stream_names": pa.array([["cam", "q"]] * known + [None] * 2 + [["q"]], pa.list_(pa.string())),
    })
    found = population(table)
    assert sorted(found) == [known + 2]  # only the known short one without its camera
    assert {f["kind"] for f in found[known + 2]} == {"duration", "missing_stream"}


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"findings": [{"kind": "spike", "value": "x"}, 7]}'])
def test_a_hostile_health_column_is_one_error_or_nothing_never_a_foreign_exception(planted, tmp_path, text):
    import shutil

    import pyarrow as pa

    from rayform.view.segment_table import Filter, SegmentTable

    client, _ = planted
    root = tmp_path / "hostile"
    shutil.copytree(client.store.root, root)
    store = rayform.Client(root)
    rewrite_catalog_parts(store, lambda table: table.set_column(table.schema.get_field_index("health"), "health",
                                                                pa.array([text] * table.num_rows, pa.string())))
    said = _doctor(root)
    if text == "not json":
        assert said.returncode == 2 and "Traceback" not in said.stderr and len(said.stderr.strip().splitlines()) == 1
        ls = subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "--store", str(root), "segments", "ls",
                             "--where", "health.spike > 1"], capture_output=True, text=True, timeout=300)
        assert ls.returncode == 2 and "health column" in ls.stderr and "Traceback" not in ls.stderr
    else:  # well-formed JSON holding nothing a finding is: nothing found in it, no error
        assert "Traceback" not in said.stderr and said.returncode in (0, 1)
        assert "spike" not in said.stdout
    page = SegmentTable(store.segments.catalog).page(Filter(flagged=True))
    # nothing from the health column; what the site's other episodes tell stays (the planted stub, the lacking one)
    assert {f["kind"] for r in page["rows"] for f in r["findings"]} == {"duration", "missing_stream"}


def test_doctor_over_a_slice_of_older_versions_reads_their_stored_health(tmp_path):
    """A slice keeps the versions it selected; when a segment gets a newer one, doctor over the
    slice reads the older version's own catalog row, health measured at its ingest: nothing is
    measured again, and its findings are the ones stored."""
    client = rayform.Client(tmp_path / "store")
    t = np.arange(40, dtype=np.int64) * 100_000_000
    values = np.random.default_rng(0).normal(size=(40, 2)).cumsum(0).astype(np.float32)
    values[:, 1] = 3.0  # a constant element: flagged
    old = client.segments.add("lab", "ep", [rayform.ArrayStream("joints", t, values)])
    client.slices.create([old], name="then")
    client.segments.add("lab", "ep", [rayform.ArrayStream("joints", t, values * 2)])  # a newer version
    report = json.loads(_doctor(tmp_path / "store", "then", "--json").stdout)
    assert report["measured_now"] == 0
    assert [(c["version"], [f["kind"] for f in c["findings"]]) for c in report["findings"]] == \
        [(old.version, ["constant"])]
