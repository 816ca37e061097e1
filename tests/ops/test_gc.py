"""rayform gc: never a reachable blob, never a young one, nothing on a dry run or a bad ref."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import StoreError
from rayform.ops.gc import collect, reachable
from rayform.ops.references import slice_closure, store_closure
from rayform.ops.verify import verify

HOUR = 3600.0


def _age(store, digest, seconds):
    path = store.backend.blob_path(digest)
    t = time.time() - seconds
    os.utime(path, (t, t))


@pytest.fixture(scope="module")
def base_store(tmp_path_factory):
    """Three segments (one with two versions), three slices, two packs; every blob two hours old."""
    root = tmp_path_factory.mktemp("gc") / "store"
    c = rayform.Client(root)
    small = DemoConfig(episodes=3, seconds=1.0, image_size=16)
    refs = ingest_demo(c, "lab", small)
    newer = ingest_demo(c, "lab", DemoConfig(episodes=1, seconds=1.5, image_size=16))  # episode 0, version 2
    slices = [c.slices.create(refs[:2], name="a"), c.slices.create(refs[1:], name="b"),
              c.slices.create(newer, name="c")]
    c.pack(slices[0], 10, workers=1, progress=False, shard_bytes=1 << 16)
    c.pack(slices[2], 10, workers=1, progress=False, shard_bytes=1 << 16)
    for blob in c.store.backend.list_blobs():
        _age(c.store, blob.digest, 2 * HOUR)
    return root


def _refs(root):
    return sorted(str(p.relative_to(root)) for p in (root / "refs").rglob("*.json"))


def _everything_reachable_verifies(c):
    """Every blob the store's refs reach (slices, packs, catalog parts, what they name) is whole."""
    report = verify(c.store, store_closure(c.store, strict=False))
    assert report.ok, report.problems


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_gc_never_deletes_a_reachable_or_young_blob(base_store, tmp_path_factory, data):
    root = tmp_path_factory.mktemp("case") / "store"
    shutil.copytree(base_store, root)
    for key in data.draw(st.lists(st.sampled_from(_refs(root)), unique=True), label="refs removed"):
        os.unlink(root / key)
    c = rayform.Client(root)
    ages = data.draw(st.lists(st.sampled_from([10.0, 0.5 * HOUR, 3 * HOUR, 30 * 24 * HOUR]), max_size=6),
                     label="orphan ages")
    orphans = {}
    for i, age in enumerate(ages):
        digest = c.store.backend.put_blob(f"orphan {i}".encode())
        _age(c.store, digest, age)
        orphans[digest] = age
    keep = reachable(c)
    before = {b.digest for b in c.store.backend.list_blobs()}
    young = {b.digest for b in c.store.backend.list_blobs() if time.time() - b.modified < HOUR}
    report = collect(c, delete=True)
    after = {b.digest for b in c.store.backend.list_blobs()}
    assert keep & before <= after  # every reachable blob that was there still is
    assert young <= after
    assert after == before - {b.digest for b in report.garbage}
    assert {b.digest for b in report.garbage} == before - keep - young
    assert all(d not in after for d, age in orphans.items() if age > HOUR)
    _everything_reachable_verifies(c)


def test_a_dry_run_deletes_nothing_and_names_what_would_go(base_store, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(base_store, root)
    os.unlink(root / next(k for k in _refs(root) if k.startswith("refs/packs/")))
    c = rayform.Client(root)
    before = sorted(b.digest for b in c.store.backend.list_blobs())
    report = collect(c)
    assert report.garbage and not report.deleted  # the pack's shards, index and manifest
    assert sorted(b.digest for b in c.store.backend.list_blobs()) == before
    assert collect(c, delete=True).garbage_bytes == report.garbage_bytes
    assert collect(c).garbage == []


def test_a_ref_gc_cannot_read_stops_it_before_anything_is_deleted(base_store, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(base_store, root)
    c = rayform.Client(root)
    c.store.backend.put_blob(b"old orphan")
    _age(c.store, rayform.store.content.sha256_hex(b"old orphan"), 2 * HOUR)
    key = next(k for k in _refs(root) if k.startswith("refs/slices/"))
    (root / key).write_text('{"id": "slc_00000000", "manifest": "../../etc/passwd"}')
    before = sorted(b.digest for b in c.store.backend.list_blobs())
    with pytest.raises(StoreError, match="Nothing was deleted"):
        collect(c, delete=True)
    assert sorted(b.digest for b in c.store.backend.list_blobs()) == before


def test_a_ref_written_during_gc_saves_the_blobs_it_names(base_store, tmp_path, monkeypatch):
    root = tmp_path / "store"
    shutil.copytree(base_store, root)
    c = rayform.Client(root)
    slice_key = next(k for k in _refs(root) if k.startswith("refs/slices/"))
    saved = (root / slice_key).read_bytes()
    os.unlink(root / slice_key)
    for key in _refs(root):  # nothing reaches anything now
        os.unlink(root / key)
    import rayform.ops.gc as gc_module

    walks = []
    real = gc_module.reachable

    def reachable_then_a_new_ref(client):
        walks.append(1)
        if len(walks) == 2:  # between listing the blobs and deleting them, a slice is made again
            (root / slice_key).parent.mkdir(parents=True, exist_ok=True)
            (root / slice_key).write_bytes(saved)
        return real(client)

    monkeypatch.setattr(gc_module, "reachable", reachable_then_a_new_ref)
    slice_ = None
    collect(c, delete=True)
    slice_ = c.slices.get(slice_key.rsplit("/", 1)[-1].removesuffix(".json"))
    assert verify(c.store, slice_closure(slice_)).ok


def test_a_blob_timed_in_whole_seconds_is_as_young_as_it_may_be(tmp_path):
    """S3 tells a blob's time in whole seconds: one written at T+0.8 says T. gc with no grace
    at T+0.9 must not take it for 0.9 s old when it may be 0.1."""
    import math
    import time

    from rayform.ops.gc import collect

    c = rayform.Client(tmp_path / "store")
    digest = c.store.put_blob(b"written a moment ago by a writer whose ref is not yet there")
    whole = math.floor(time.time()) - 5
    os.utime(c.store.backend.blob_path(digest), (whole, whole))
    report = collect(c, delete=True, grace_s=0, force=True, now=whole + 0.9)
    assert report.garbage == [] and report.young == 1 and c.store.has_blob(digest)
    assert [b.digest for b in collect(c, delete=True, grace_s=0, force=True, now=whole + 1.5).garbage] == [digest]


def test_a_grace_under_the_floor_deletes_only_when_forced(tmp_path):
    from rayform.errors import InvalidInput
    from rayform.ops.gc import GRACE_FLOOR_S, collect

    c = rayform.Client(tmp_path / "store")
    c.store.put_blob(b"x")
    with pytest.raises(InvalidInput, match="--force"):
        collect(c, delete=True, grace_s=GRACE_FLOOR_S - 1)
    assert collect(c, grace_s=0, now=time.time() + 5).garbage  # a dry run says what would go, unforced
