"""rayform push between local stores: the closure, the same ids, resumption, version order."""

from __future__ import annotations

import os

import pytest

import rayform
from rayform.errors import IntegrityError, SliceNotFound
from rayform.ops.push import push
from rayform.ops.references import pack_closure, slice_closure
from rayform.ops.verify import verify
from rayform.recordings.catalog_parts import CatalogRow


def _closure(client, slice_):
    out = {r.blob for r in slice_closure(slice_)}
    for p in client.packs.list(slice_):
        out |= {r.blob for r in pack_closure(p)}
    return out


def test_push_copies_the_closure_with_the_same_ids_and_it_verifies(packed_small, tmp_path):
    src, s = packed_small
    dest = rayform.Client(tmp_path / "dst")
    report = push(src, s.id, dest, progress=False)
    closure = _closure(src, s)
    assert report.copied == len(closure) and report.present == 0
    listed = {p.part for p in dest.segments.catalog.parts.listed()}  # the destination's catalog lists them
    assert {b.digest for b in dest.store.backend.list_blobs()} == closure | listed  # nothing more, nothing less
    pushed = dest.slices.get(s.id)
    assert pushed.digest == s.digest and pushed.segments == s.segments
    assert [p.digest for p in dest.packs.list(pushed)] == [p.digest for p in src.packs.list(s)]
    assert verify(dest.store, [*slice_closure(pushed), *(x for p in dest.packs.list(pushed) for x in pack_closure(p))]).ok
    assert [r.version for r in dest.segments.list()] == [r.version for r in src.segments.list()]
    again = push(src, s.id, dest, progress=False)
    assert (again.copied, again.present) == (0, len(closure))


def test_an_interrupted_push_leaves_no_ref_and_the_next_one_copies_only_the_rest(packed_small, tmp_path, monkeypatch):
    src, s = packed_small
    dest = rayform.Client(tmp_path / "dst")
    closure = _closure(src, s)
    store_type = type(dest.store.backend)
    real = store_type.put_blob_file  # a local source's blobs go over as files
    calls = {"n": 0}

    def cut_after_five(self, path, digest=None, **kw):
        calls["n"] += 1
        if calls["n"] > 5:
            raise rayform.errors.StoreError("connection reset (simulated cut)")
        return real(self, path, digest, **kw)

    with monkeypatch.context() as m:
        m.setattr(store_type, "put_blob_file", cut_after_five)
        with pytest.raises(rayform.errors.StoreError, match="simulated cut"):
            push(src, s.id, dest, progress=False, threads=1)
    arrived = {b.digest for b in dest.store.backend.list_blobs()}
    assert 0 < len(arrived) < len(closure)
    with pytest.raises(SliceNotFound):  # refs are written last: no ref names a missing blob
        dest.slices.get(s.id)
    assert dest.segments.list() == []
    report = push(src, s.id, dest, progress=False)
    assert (report.copied, report.present) == (len(closure) - len(arrived), len(arrived))
    assert dest.slices.get(s.id).digest == s.digest


def test_a_corrupt_source_blob_is_never_pushed(packed_small, tmp_path):
    src, s = packed_small
    shard = src.packs.list(s)[0].shards[0].sha256
    path = src.store.backend.blob_path(shard)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    dest = rayform.Client(tmp_path / "dst")
    with pytest.raises(IntegrityError, match=shard[:16]):
        push(src, s.id, dest, progress=False)
    assert not dest.store.has_blob(shard)
    with pytest.raises(SliceNotFound):
        dest.slices.get(s.id)


def test_a_pushed_old_version_never_becomes_the_latest(tmp_path):
    """A segment's versions are in the order each was recorded at its origin (the time a row
    keeps, and push copies): an old version pushed after a newer one is still the older."""
    dest = rayform.Client(tmp_path / "dst")
    a, b, c, mine = (f"{i}" * 64 for i in "abcd")

    def row(version, recorded):
        return CatalogRow("seg_0123456789ab", "ep", "lab", version, None, recorded, 0, 10)

    dest.segments.record_versions([row(c, 3)])
    dest.segments.record_versions([row(a, 1)])
    dest.segments.record_versions([row(b, 2), row(a, 1)])  # a version listed already is not listed again
    assert dest.segments.versions("seg_0123456789ab") == [a, b, c]
    assert dest.segments.catalog.table().num_rows == 3
    other = rayform.Client(tmp_path / "other")
    other.segments.record_versions([row(mine, 10)])
    other.segments.record_versions([row(a, 1)])
    assert other.segments.versions("seg_0123456789ab") == [a, mine]


def test_a_blob_missing_from_the_source_is_one_error_naming_the_fix(packed_small, tmp_path):
    from rayform.errors import BlobNotFound

    src, s = packed_small
    gone = next(r.blob for r in slice_closure(s) if r.bundle)
    os.unlink(src.store.backend.blob_path(gone))
    dest = rayform.Client(tmp_path / "dst")
    with pytest.raises(BlobNotFound, match=f"{gone[:16]}.*missing.*rayform verify {s.id}"):
        push(src, s.id, dest, progress=False)
    with pytest.raises(SliceNotFound):
        dest.slices.get(s.id)


def test_a_push_carries_each_episodes_health(tmp_path):
    import numpy as np

    src = rayform.Client(tmp_path / "src")
    t = np.arange(40, dtype=np.int64) * 100_000_000
    q = np.cumsum(np.random.default_rng(0).normal(0, 0.01, (40, 3)), axis=0)
    q[:, 1] = 0.2  # a joint stuck
    ref = src.segments.add("lab", "stuck", [rayform.ArrayStream("q", t, q)])
    s = src.slices.create([ref], name="one")
    dest = rayform.Client(tmp_path / "dst")
    push(src, s.id, dest, progress=False)
    columns = ["id", "health", "flags"]
    assert dest.segments.catalog.latest(columns=columns).to_pylist() == \
        src.segments.catalog.latest(columns=columns).to_pylist()
    assert dest.slices.create(where="'constant' in flags", name="stuck").segments == s.segments
