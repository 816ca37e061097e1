"""verify: every blob of a slice and its packs re-hashed; one flipped byte is found and named."""

from __future__ import annotations

import os
import re

from hostile import hostile_bundles
from rayform.ops.references import Reference, pack_closure, segment_version, slice_closure
from rayform.ops.verify import verify


def _flip(path: str, at: int) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def test_a_clean_slice_and_pack_verify(demo_client):
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    report = verify(client.store, [*slice_closure(s), *pack_closure(pack)])
    assert report.ok and report.blobs > len(pack.shards) + len(s.segments)


def test_one_flipped_byte_in_one_shard_is_found_and_named(demo_client):
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    bad = pack.shards[1].sha256
    _flip(client.store.backend.blob_path(bad), 5000)
    report = verify(client.store, [*slice_closure(s), *pack_closure(pack)])
    assert [p.blob for p in report.problems] == [bad]
    assert "shard 1" in str(report.problems[0]) and "corrupt" in str(report.problems[0])


def test_a_missing_segment_blob_is_reported(demo_client):
    client, s = demo_client
    seg = s.segment(0)
    gone = seg.bundle.digest  # its manifest and small arrays (the demo's frames too: small)
    assert seg.streams["cam0/rgb"].data[0][0] in seg.bundle
    os.unlink(client.store.backend.blob_path(gone))
    report = verify(client.store, slice_closure(s))
    assert [(p.blob, p.error) for p in report.problems] == [(gone, "is missing")]
    assert "segment" in report.problems[0].what and "bundle" in report.problems[0].what


def test_the_progress_bar_counts_each_blob_once(demo_client, capsys):
    """A blob two things name (here given twice) is hashed once, and the bar says as many as the report."""
    client, s = demo_client
    blobs = list(slice_closure(s))
    report = verify(client.store, blobs + blobs[:5], progress=True)
    err = capsys.readouterr().err
    counts = [int(m) for m in re.findall(r"verify: (\d+)blob", err)]
    assert report.blobs == len({r.blob for r in blobs}) and counts[-1] == report.blobs, err[-500:]


def test_verify_opens_every_bundle_and_reports_a_segment_it_cannot_read(demo_client):
    """A bundle is a blob named by its hash: one written under its true name hashes right, so
    verify opens it, checks its index and every member, and says so when the segment in it
    cannot be read; never passing over it."""
    client, s = demo_client
    seg = s.segment(0)
    assert verify(client.store, segment_version(client.store, seg.id, seg.version, bundle=seg.bundle.digest)).ok
    for case, data in hostile_bundles(seg).items():
        digest = client.store.put_blob(data)
        report = verify(client.store, segment_version(client.store, seg.id, seg.version, bundle=digest))
        assert not report.ok, case
        assert {p.blob for p in report.problems} == {digest} and len(report.problems) == 1, (case, report.problems)
        assert "bundle" in report.problems[0].what and seg.id in report.problems[0].what


def test_verify_stops_at_its_limit_without_walking_the_rest(demo_client):
    client, s = demo_client
    walked = 0

    def references():
        nonlocal walked
        for i in range(1_000_000):
            walked += 1
            yield Reference(f"{i:064x}", f"segment {i}")

    report = verify(client.store, references(), limit=7)
    assert report.stopped and len(report.problems) == 7 and walked == 7
    assert all(p.error == "is missing" for p in report.problems)


def test_a_store_walk_names_an_unreadable_catalog_part_and_walks_the_rest(tmp_path):
    """A catalog part that cannot be read is said (verify reports it), and every other part's
    rows are still walked: the walk never stops at the first bad part, nor vouches for it."""
    import numpy as np

    import rayform
    from rayform.ops.references import store_closure
    from rayform.recordings.catalog_parts import new_key, ref_key

    client = rayform.Client(tmp_path / "store")
    t = np.arange(5, dtype=np.int64) * 10**8
    refs = [client.segments.add("lab", f"e{i}", [rayform.ArrayStream("j", t, np.full((5, 1), i, np.float32))])
            for i in range(2)]
    expected = {r.blob for ref in refs for r in segment_version(client.store, ref.id, ref.version)}
    bad = client.store.put_blob(b"PAR1 not a parquet file")
    client.store.put_ref(ref_key("lab", new_key()), {"format": "rayform.catalog-part/1", "part": bad, "rows": 1,
                                                      "replaces": []})
    walk = list(store_closure(client.store, strict=False))
    assert [r.blob for r in walk if r.error is not None] == [bad]
    assert expected <= {r.blob for r in walk}
    report = verify(client.store, walk)
    assert [p.blob for p in report.problems] == [bad] and "catalog part" in report.problems[0].what
