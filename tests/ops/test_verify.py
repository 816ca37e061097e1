"""verify: every blob of a slice and its packs re-hashed; one flipped byte is found and named."""

from __future__ import annotations

import os
import re

from rayform.ops.references import pack_closure, slice_closure
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
    totals = {int(m) for m in re.findall(r"\| *\d+/(\d+) ", err)}
    assert report.blobs == len({b for b, _ in blobs}) and totals == {report.blobs}, err[-500:]
