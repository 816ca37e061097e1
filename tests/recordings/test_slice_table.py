"""A large slice keeps its segments in a table blob (``rayform.slice/2``): it reads, pickles,
splits, packs, pushes and is kept by gc as a listed one does; a hostile table is Malformed.
(``TABLE_AT`` is lowered here so a few segments make one.)"""

from __future__ import annotations

import pickle

import msgpack
import numpy as np
import pytest

import rayform
from rayform.errors import Malformed
from rayform.ops.gc import collect
from rayform.ops.push import push
from rayform.ops.references import slice_closure
from rayform.recordings import slices as slices_module
from rayform.recordings.slice_table import SliceSegments, encode

T = np.arange(30, dtype=np.int64) * 66_666_667


@pytest.fixture
def tabled(client, monkeypatch):
    monkeypatch.setattr(slices_module, "TABLE_AT", 2)
    refs = client.segments.add_many([("lab", f"ep{i}", [rayform.ArrayStream("joints", T, np.full((30, 2), i, np.float32))],
                                      {"task": "t"}) for i in range(5)])
    listed = [{"id": r.id, "version": r.version, "start_ns": 0, "end_ns": 10**9} if i == 2 else r
              for i, r in enumerate(refs)]
    return client, client.slices.create(listed, name="big")


def test_a_large_slice_is_a_table_and_reads_as_a_listed_one(tabled):
    client, s = tabled
    manifest = client.store.get_json_blob(s.digest)
    assert manifest["format"] == "rayform.slice/2" and manifest["count"] == 5 and "segments" not in manifest
    again = client.slices.get(s.id)
    assert list(again.segments) == list(s.segments) and len(again.segments) == 5
    assert again.segments[2].start_ns == 0 and again.segments[2].end_ns == 10**9 and again.segments[0].start_ns is None
    assert all(seg.bundle for seg in again.segments) and again.sites == ["lab"]
    assert again.segment(4).values("joints")[0].tolist() == [4.0, 4.0]
    copied = pickle.loads(pickle.dumps(again))
    assert copied.digest == s.digest and list(copied.segments) == list(s.segments)
    assert again.segments[1:3] == list(s.segments)[1:3]


def test_a_large_slice_splits_packs_pushes_and_survives_gc(tabled, tmp_path):
    client, s = tabled
    parts = client.slices.split(s, {"a": 0.5, "b": 0.5})
    assert sum(len(p.segments) for p in parts.values()) == 5
    pack = client.pack(s, 15, workers=1, progress=False)
    assert pack.samples > 0
    assert s.table_blob in {r.blob for r in slice_closure(s)}
    collect(client, delete=True, grace_s=0, force=True)
    assert client.slices.get(s.id).segment(0).values("joints").shape == (30, 2)
    dest = rayform.Client(tmp_path / "dest")
    push(client, s.id, dest, progress=False)
    there = dest.slices.get(s.id)
    assert list(there.segments) == list(s.segments) and there.segment(3).values("joints")[0].tolist() == [3.0, 3.0]


def _table(**edit) -> bytes:
    doc = msgpack.unpackb(encode(list(SliceSegments(table=encode_default()))), raw=False)
    doc.update(edit)
    return msgpack.packb(doc, use_bin_type=True)


def encode_default() -> bytes:
    from rayform.recordings.slice_table import SliceSegment

    return encode([SliceSegment("seg_0123456789ab", "a" * 64, "lab", bundle="b" * 64),
                   SliceSegment("seg_0123456789ac", "c" * 64, "lab", 5, 9)])


@pytest.mark.parametrize("edit", [
    dict(format="other"), dict(count=3), dict(count=-1), dict(id=b"\0" * 11), dict(sites=["../x"]),
    dict(site=np.array([0, 7], "<u4").tobytes()), dict(bundle=np.array([0, 4], "<i4").tobytes()),
    dict(bundles=b"\0" * 31),
])
def test_a_hostile_table_is_one_malformed(edit):
    with pytest.raises(Malformed):
        SliceSegments(table=_table(**edit))
    with pytest.raises(Malformed):
        SliceSegments(table=b"\xc1 not msgpack")
