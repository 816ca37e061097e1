"""The catalog: episodes stored in bulk (objects written grow with bytes, not episodes), one
part per ingest per site, appenders that never conflict, compaction that loses nothing, and
stores written before catalogs still read (and folded in)."""

from __future__ import annotations

import io
import json
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rayform
from rayform.errors import Malformed
from rayform.recordings import catalog as catalog_module
from rayform.recordings.catalog_parts import PREFIX, CatalogParts, CatalogRow, new_key, ref_key
from rayform.recordings.segment_writer import SEGMENT_FORMAT, segment_id
from rayform.recordings.slices import SliceSegment
from rayform.store.content import canonical_json

T = np.arange(10, dtype=np.int64) * 100_000_000


def _episode(i: int, task: str = "pick", meta: dict | None = None):
    values = np.random.default_rng(i).normal(size=(10, 3)).astype(np.float32)
    return ("lab", f"ep-{i:06d}", [rayform.ArrayStream("joints", T, values)], {"task": task, **(meta or {})})


def _objects(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("episodes", [5, 500])
def test_an_ingest_writes_a_few_objects_whatever_its_episode_count(tmp_path, episodes):
    client = rayform.Client(tmp_path / "store")
    client.segments.add_many([_episode(0)])  # the store exists
    before = _objects(tmp_path / "store")
    refs = client.segments.add_many([_episode(i) for i in range(1, episodes + 1)])
    written = _objects(tmp_path / "store") - before
    # one bundle (manifests, timestamps, values), one catalog part and its ref
    assert len(written) == 3, sorted(written)
    assert sum(p.startswith(f"{PREFIX}/lab/") for p in written) == 1
    assert len(client.segments.list("lab")) == episodes + 1
    seg = client.segments.get(refs[-1].id, refs[-1].version)  # each one addressable on its own
    assert seg.name == f"ep-{episodes:06d}" and seg.values("joints").shape == (10, 3)


def test_a_segment_keeps_every_version_in_the_order_they_were_recorded(client):
    first = client.segments.add("lab", "ep", _episode(1)[2])
    second = client.segments.add("lab", "ep", _episode(2)[2])
    again = client.segments.add("lab", "ep", _episode(2)[2])  # nothing changed: the same version
    assert again.version == second.version != first.version
    assert client.segments.versions(first.id) == [first.version, second.version]
    assert client.segments.get(first.id).version == second.version
    assert client.segments.get(first.id, first.version).values("joints").tolist() == \
        _episode(1)[2][0].values.tolist()  # the old one reads as it was
    assert [r.version for r in client.segments.list()] == [second.version]


def test_a_row_says_what_a_query_needs(client):
    client.segments.add("lab", "ep", [rayform.ArrayStream("joints", T, np.zeros((10, 2))),
                                      rayform.ImageStream("cam/depth", T[::2], np.zeros((5, 4, 4), np.uint16))],
                        {"task": "stack", "success": True, "robot": {"arm": "ur5"}})
    row = client.segments.catalog.latest().to_pylist()[0]
    assert row["task"] == "stack" and row["duration_s"] == pytest.approx(0.9)
    assert (row["start_ns"], row["end_ns"]) == (0, 900_000_000)
    assert json.loads(row["meta"]) == {"task": "stack", "success": True, "robot": {"arm": "ur5"}}
    streams = json.loads(row["streams"])
    assert streams["joints"]["rate_hz"] == pytest.approx(10.0) and streams["cam/depth"]["rate_hz"] == pytest.approx(5.0)
    assert streams["cam/depth"]["shape"] == [4, 4] and row["stream_names"] == ["cam/depth", "joints"]


def test_appenders_in_many_threads_lose_no_part(tmp_path):
    root = tmp_path / "store"
    rayform.Client(root).segments.add_many([_episode(0)])

    def ingest(k: int) -> None:
        rayform.Client(root).segments.add_many([_episode(100 * k + i) for i in range(1, 6)])

    threads = [threading.Thread(target=ingest, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client = rayform.Client(root)
    assert len(client.segments.list()) == 1 + 6 * 5
    assert len(client.segments.catalog.parts.live("lab")) == 7


def test_compaction_keeps_every_row_and_a_part_appended_meanwhile(tmp_path, monkeypatch):
    client = rayform.Client(tmp_path / "store")
    for k in range(4):
        client.segments.add_many([_episode(10 * k + i) for i in range(3)])
    changed = client.segments.add("lab", "ep-000000", _episode(99)[2])  # a second version of one
    before = client.segments.catalog.table().to_pylist()
    real = CatalogParts.compact

    def meanwhile(self, site, merged, rows, replaced, legacy=()):
        rayform.Client(tmp_path / "store").segments.add_many([_episode(500)])  # another writer appends
        return real(self, site, merged, rows, replaced, legacy)

    monkeypatch.setattr(CatalogParts, "compact", meanwhile)
    done = client.segments.compact("lab")
    assert done is not None and len(done.replaces) == 5 and done.part.rows == len(before)
    parts = client.segments.catalog.parts.live("lab")
    assert len(parts) == 2 and parts[0].key == done.part.key  # the compacted one, then the one appended
    after = client.segments.catalog.table().to_pylist()
    assert after[:len(before)] == before and after[-1]["name"] == "ep-000500"
    assert client.segments.get(changed.id).version == changed.version
    monkeypatch.setattr(CatalogParts, "compact", real)
    assert client.segments.compact("lab").part.rows == len(before) + 1
    assert client.segments.compact("lab") is None  # one part: nothing to do


def test_a_reader_listing_during_a_compaction_sees_every_row_once(tmp_path):
    client = rayform.Client(tmp_path / "store")
    for k in range(3):
        client.segments.add_many([_episode(10 * k + i) for i in range(2)])
    parts = client.segments.catalog.parts.live("lab")
    rows = client.segments.catalog.table()
    from rayform.recordings.catalog_parts import encode_table

    # the compacted part written, the parts it replaces not yet removed: as a crash would leave it
    client.segments.catalog.parts._write("lab", encode_table(rows), new_key(parts[-1].key.split("-")[0]),
                                         tuple(p.key for p in parts), rows.num_rows)
    assert len(client.segments.catalog.parts.listed("lab")) == 4
    assert client.segments.catalog.table().to_pylist() == rows.to_pylist()


def _legacy_store(root):
    """A store as rayform wrote it before catalogs: loose manifests, a ref per segment."""
    client = rayform.Client(root)
    store = client.store
    out = []
    for i in range(3):
        ts = store.put_blob(rayform.codec.records.to_npy(T))
        values = store.put_blob(rayform.codec.records.to_npy(np.full((10, 2), i, np.float32)))
        name = f"old-{i}"
        sid = segment_id("lab", name)
        manifest = {"format": SEGMENT_FORMAT, "id": sid, "site": "lab", "name": name, "meta": {"task": "old"},
                    "streams": {"joints": {"kind": "array", "count": 10, "dtype": "<f4", "shape": [2],
                                           "timestamps": ts, "data": [[values, 10]], "meta": {}}}}
        version = store.put_blob(canonical_json(manifest))
        store.put_ref(f"refs/segments/lab/{sid}.json", {"id": sid, "site": "lab", "name": name, "versions": [version]})
        out.append(SliceSegment(sid, version, "lab"))
    return out


def test_a_store_written_before_catalogs_reads_and_compacts(tmp_path):
    root = tmp_path / "store"
    old = _legacy_store(root)
    client = rayform.Client(root)
    s = client.slices.create([{"id": o.id, "version": o.version} for o in old], name="old")
    assert [seg.bundle for seg in s.segments] == [None] * 3
    assert sorted(r.name for r in client.segments.list()) == ["old-0", "old-1", "old-2"]
    new = client.segments.add("lab", "new", _episode(1)[2])
    assert client.segments.get(old[1].id).values("joints")[0].tolist() == [1.0, 1.0]
    done = client.segments.compact("lab")
    assert done.legacy == 3 and not list((root / "refs" / "segments").rglob("*.json"))
    catalog_module._CATALOGS.clear()
    again = rayform.Client(root)
    rows = {r["name"]: r for r in again.segments.catalog.table().to_pylist()}
    assert set(rows) == {"old-0", "old-1", "old-2", "new"} and rows["old-0"]["task"] == "old"
    assert rows["old-0"]["duration_s"] == pytest.approx(0.9) and rows["old-0"]["bundle"] is None
    assert again.segments.get(new.id).version == new.version
    assert again.slices.get(s.id).segment(2).values("joints")[0].tolist() == [2.0, 2.0]
    from rayform.ops.gc import collect

    collect(again, delete=True, grace_s=0, force=True)  # the folded part now reaches the loose manifests and data
    assert again.slices.get(s.id).segment(0).values("joints").shape == (10, 2)
    assert again.segments.get(old[0].id).values("joints").shape == (10, 2)


@pytest.mark.parametrize("hostile", ["not parquet", "bad id", "another site", "bad bundle", "rows lie"])
def test_a_hostile_catalog_part_is_one_malformed(tmp_path, hostile):
    client = rayform.Client(tmp_path / "store")
    client.segments.add_many([_episode(i) for i in range(3)])
    part = client.segments.catalog.parts.live("lab")[0]
    table = catalog_module.part_table(client.store, part)
    import pyarrow as pa

    from rayform.recordings.catalog_parts import encode_table

    def column(name, values):
        return table.set_column(table.schema.get_field_index(name), name, pa.array(values, pa.string()))

    data = {
        "not parquet": b"PAR1 not a parquet file",
        "bad id": encode_table(column("id", ["../../etc"] * 3)),
        "another site": encode_table(column("site", ["other"] * 3)),
        "bad bundle": encode_table(column("bundle", ["/tmp/x"] * 3)),
        "rows lie": encode_table(table),
    }[hostile]
    digest = client.store.put_blob(data)
    rows = 99 if hostile == "rows lie" else 3
    client.store.put_ref(ref_key("lab", part.key), {"format": "rayform.catalog-part/1", "part": digest, "rows": rows,
                                                    "replaces": []})
    catalog_module._TABLES.clear()
    with pytest.raises(Malformed):
        client.segments.list()


def test_appends_keep_a_site_to_a_few_parts_every_row_kept_in_order(tmp_path):
    """Past AUTO_PARTS parts an append merges the newest, LSM-style: a catalog of many ingests
    stays a few parts (one listing and a few reads to list a million episodes)."""
    from rayform.recordings.segments import AUTO_PARTS

    client = rayform.Client(tmp_path / "store")
    for k in range(3 * AUTO_PARTS):
        client.segments.add_many([_episode(10 * k + i) for i in range(1 + k % 3)])
    parts = client.segments.catalog.parts.live("lab")
    assert len(parts) <= AUTO_PARTS and len(client.segments.catalog.parts.listed("lab")) == len(parts)
    names = [r["name"] for r in client.segments.catalog.table().to_pylist()]
    expected = [f"ep-{10 * k + i:06d}" for k in range(3 * AUTO_PARTS) for i in range(1 + k % 3)]
    assert names == expected


def test_stream_counts_are_the_catalogs_and_say_what_it_does_not_list(tmp_path):
    root = tmp_path / "store"
    old = _legacy_store(root)  # versions only refs name: their rows have no stream names
    client = rayform.Client(root)
    t = np.arange(5, dtype=np.int64) * 100_000_000
    with_cam = [rayform.ArrayStream("joints", t, np.zeros((5, 2), np.float32)),
                rayform.ArrayStream("cam/exposure", t, np.ones((5, 1), np.float32))]
    a = client.segments.add("lab", "a", with_cam)
    b = client.segments.add("lab", "b", with_cam[:1])
    from rayform.recordings.catalog import hex_bytes

    unknown = "ab" * 32
    versions = hex_bytes([a.version, b.version, a.version, old[0].version, unknown], 32)
    counts, unlisted = client.segments.catalog.stream_counts(versions)
    assert counts == {"joints": 3, "cam/exposure": 2}  # a twice, as the slice lists it
    assert unlisted.tolist() == [False, False, False, True, True]


def test_a_packs_common_streams_read_the_catalog_and_the_manifests_it_lacks(tmp_path, monkeypatch):
    from rayform.packer.survey import _common_streams

    root = tmp_path / "store"
    old = _legacy_store(root)
    client = rayform.Client(root)
    t = np.arange(10, dtype=np.int64) * 100_000_000
    new = client.segments.add("lab", "new", [rayform.ArrayStream("joints", t, np.zeros((10, 2), np.float32)),
                                             rayform.ArrayStream("extra", t, np.zeros((10, 1), np.float32))])
    both = client.slices.create([{"id": o.id, "version": o.version} for o in old] + [new], name="both")
    fresh = client.slices.create([new], name="new")
    read = []
    real = client.segments.manifest.__func__

    def manifest(self, *args, **kwargs):
        read.append(args[0])
        return real(self, *args, **kwargs)

    monkeypatch.setattr("rayform.recordings.segments.Segments.manifest", manifest)
    assert _common_streams(fresh) == ("extra", "joints") and read == []  # the catalog said it all
    assert _common_streams(both) == ("joints",) and sorted(read) == sorted(o.id for o in old)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=40),
       st.randoms(use_true_random=False))
def test_one_row_per_version_whatever_the_parts_order(rows, rnd):
    """Compactions that ran at once over overlapping runs of parts: merged later in any order,
    the same rows stay, one a version, the one recorded last."""
    from rayform.recordings.catalog_parts import table_of, unique_versions

    made = [CatalogRow(f"seg_{i:012x}", "n", "lab", f"{v:064x}", None, recorded, 0, 1) for i, v, recorded in rows]
    shuffled = list(made)
    rnd.shuffle(shuffled)
    kept = [unique_versions(table_of(m)) for m in (made, shuffled)]
    as_sets = [set(zip(*(k.column(c).to_pylist() for c in ("id", "version", "recorded")))) for k in kept]
    assert as_sets[0] == as_sets[1]
    latest: dict[tuple[str, str], int] = {}
    for r in made:
        latest[(r.id, r.version)] = max(latest.get((r.id, r.version), r.recorded), r.recorded)
    assert as_sets[0] == {(i, v, rec) for (i, v), rec in latest.items()}
    listed = iter([(r.id, r.version, r.recorded) for r in made])
    in_order = list(zip(*(kept[0].column(c).to_pylist() for c in ("id", "version", "recorded"))))
    assert all(row in listed for row in in_order)  # a subsequence: the table's own order kept


def test_segments_compact_folds_duplicated_rows_into_one_per_version(client):
    """Two compactions ran at once over overlapping parts: both merged parts are live, sharing
    rows; the next compaction keeps one row a version."""
    from rayform.recordings.catalog_parts import CatalogParts, encode_table, table_of

    t = np.arange(5, dtype=np.int64) * 10**8
    refs = [client.segments.add("lab", f"e{i}", [rayform.ArrayStream("j", t, np.full((5, 1), i, np.float32))])
            for i in range(3)]
    parts = CatalogParts(client.store)
    rows = client.segments.catalog.table(site="lab")
    assert rows.num_rows == 3
    for _ in range(2):  # what two compactions that raced leave: the same rows in two live parts
        parts._write("lab", encode_table(rows.select(list(table_of([]).column_names))), "20990101T000000000000Z-"
                     + os.urandom(4).hex(), (), rows.num_rows)
    assert client.segments.catalog.table(site="lab").num_rows == 9
    client.segments.compact("lab")
    after = client.segments.catalog.table(site="lab")
    assert sorted(zip(after.column("id").to_pylist(), after.column("version").to_pylist())) == \
        sorted((r.id, r.version) for r in refs)


@pytest.mark.parametrize("bomb", ["rows", "text"])
def test_a_catalog_part_that_decodes_to_far_more_than_its_bytes_is_refused_before_decoding(tmp_path, bomb):
    """Parquet compresses a constant column to nothing: a small part can declare millions of
    rows, or one long text repeated on every row (gigabytes decoded). Both are refused from
    what the footer and the dictionary say, before decoding."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    client = rayform.Client(tmp_path / "store")
    client.segments.add_many([_episode(i) for i in range(3)])
    part = client.segments.catalog.parts.live("lab")[0]
    table = catalog_module.part_table(client.store, part)
    out = io.BytesIO()
    if bomb == "rows":  # five million copies of one id: some kilobytes
        n = 5_000_000
        ids = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([table.column("id")[0].as_py()]))
        pq.write_table(pa.table({"id": ids}), out, compression="zstd", store_schema=False)
        message = "declares 5000000 rows"
    else:  # 30,000 rows sharing one text of a MiB: 30 GB decoded
        n = 30_000
        rows = table.take(pa.array(np.zeros(n, np.int64)))
        meta = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([os.urandom(1 << 19).hex()]))
        pq.write_table(rows.set_column(rows.schema.get_field_index("meta"), "meta", meta), out, compression="zstd",
                       store_schema=False)  # read back as plain text, as an honest part
        message = "its text decodes to over"
    digest = client.store.put_blob(out.getvalue())
    client.store.put_ref(ref_key("lab", part.key), {"format": "rayform.catalog-part/1", "part": digest, "rows": n,
                                                    "replaces": []})
    catalog_module._TABLES.clear()
    with pytest.raises(Malformed, match=message):
        client.segments.catalog.table(site="lab")  # every column, as a query on metadata reads it


def test_a_part_ref_that_fails_to_read_once_but_is_there_is_still_listed(tmp_path, monkeypatch):
    """Listing passes over a part whose ref went between the listing and its read (a
    compaction removed it); one that answers "not found" once but is there is read again, never
    passed over: gc would take its rows' blobs."""
    from rayform.errors import NotFound

    client = rayform.Client(tmp_path / "store")
    client.segments.add_many([_episode(i) for i in range(2)])
    parts = CatalogParts(client.store)
    real, failed = client.store.get_ref, []

    def once_missing(key, parse=None):
        if key.startswith(PREFIX) and not failed:
            failed.append(key)
            raise NotFound(key)
        return real(key, parse)

    monkeypatch.setattr(client.store, "get_ref", once_missing)
    assert len(parts.listed("lab")) == 1 and failed


def test_a_compaction_between_a_listing_and_its_reads_never_hides_rows(tmp_path, monkeypatch):
    """A compaction writes its part, then removes what it replaces: a listing taken before the
    first and read after the second finds neither. Listing again finds the compaction's part,
    so every row is seen (gc walking the first listing would delete every row's blobs)."""
    client = rayform.Client(tmp_path / "store")
    for i in range(3):
        client.segments.add_many([_episode(i)])
    parts = CatalogParts(client.store)
    before = {p.key for p in parts.live("lab")}
    assert len(before) >= 2
    real, compacted = client.store.list_refs, []

    def listing_then_compaction(prefix):
        keys = list(real(prefix))
        if not compacted:
            compacted.append(None)
            compacted[0] = client.segments.compact("lab")
        return iter(keys)

    monkeypatch.setattr(client.store, "list_refs", listing_then_compaction)
    live = parts.live("lab")
    assert compacted[0] is not None and {p.key for p in live}.isdisjoint(before)
    assert sum(p.rows for p in live) == 3


def test_the_fingerprint_changes_with_every_write_and_sites_need_no_decoding(tmp_path, monkeypatch):
    """What a reader keeping a table compares (``rayform view``): it changes when a part is
    appended or compacted; the sites are read from the listings, no part decoded."""
    client = rayform.Client(tmp_path / "store")
    catalog = client.segments.catalog
    seen = [catalog.fingerprint()]
    client.segments.add_many([_episode(0)])
    seen.append(catalog.fingerprint())
    client.segments.add_many([("other", "x", _episode(1)[2], {})])
    seen.append(catalog.fingerprint())
    client.segments.add_many([_episode(2)])
    seen.append(catalog.fingerprint())
    client.segments.compact("lab")
    seen.append(catalog.fingerprint())
    assert len(set(seen)) == len(seen)
    assert catalog.fingerprint() == seen[-1]  # and the same while nothing is written
    monkeypatch.setattr(catalog_module, "part_table", lambda *a, **k: pytest.fail("a part decoded"))
    assert catalog.sites() == client.segments.sites() == ["lab", "other"]


def test_the_catalog_says_what_it_references_and_a_walk_that_is_not_strict_reads_past_what_fails(tmp_path):
    """``part_blobs``, ``places`` and ``part_rows``: what ``ops`` (gc, verify) and the CLI ask
    the catalog, its parts and refs staying its own."""
    root = tmp_path / "store"
    old = _legacy_store(root)
    client = rayform.Client(root)
    new = [client.segments.add(site, f"n{i}", _episode(i)[2]) for i, site in enumerate(["lab", "lab", "home"])]
    catalog = client.segments.catalog
    parts = catalog.parts.live()
    assert sorted(b.digest for b in catalog.part_blobs()) == sorted(p.part for p in parts)
    assert sum(catalog.part_rows("lab")) == 2 and sum(catalog.part_rows("home")) == 1
    places, unreadable = catalog.places()
    assert unreadable == [] and len(places) == 6
    assert {(i, v) for i, v, _ in places} == {(o.id, o.version) for o in old} | {(r.id, r.version) for r in new}
    assert [b for _, _, b in places[:3]] == [None] * 3 and all(b for _, _, b in places[3:])  # legacy: loose
    # a part that cannot be read, and a per-segment ref that cannot
    home = catalog.parts.live("home")[0]
    client.store.put_ref(ref_key("home", home.key), {"format": "rayform.catalog-part/1", "part": "0" * 64, "rows": 1,
                                                     "replaces": []})
    client.store.put_ref(f"refs/segments/lab/{old[0].id}.json", {"id": old[0].id, "site": "elsewhere"})
    catalog_module._TABLES.clear()
    with pytest.raises(Malformed):
        catalog.places(strict=True)
    places, unreadable = catalog.places(strict=False)
    assert {(i, v) for i, v, _ in places} == {(o.id, o.version) for o in old[1:]} | {(r.id, r.version) for r in new[:2]}
    assert sorted(b.what.split()[0] for b in unreadable) == ["catalog", "per-segment"]
    assert all(b.error and b.error.startswith("unreadable: ") for b in unreadable)
