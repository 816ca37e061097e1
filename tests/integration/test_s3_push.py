"""push to a real S3 endpoint on loopback and back; a cut push resumed; gc on S3; training from there."""

from __future__ import annotations

import time

import pytest

import rayform
from rayform.errors import SliceNotFound, StoreError
from rayform.ops.gc import collect
from rayform.ops.push import push
from rayform.ops.references import pack_closure, slice_closure
from rayform.ops.verify import verify

pytestmark = pytest.mark.s3


def _everything(client, slice_):
    return [*slice_closure(slice_), *(x for p in client.packs.list(slice_) for x in pack_closure(p))]


def test_push_to_s3_and_back_keeps_every_id_and_verifies(packed_small, s3_store_url, tmp_path):
    src, s = packed_small
    url, options = s3_store_url
    s3 = rayform.Client(url, storage_options=options, cache=tmp_path / "cache")
    up = push(src, s.id, s3, progress=False)
    assert up.copied == len({r.blob for r in _everything(src, s)})
    on_s3 = s3.slices.get(s.id)
    assert on_s3.digest == s.digest
    assert verify(s3.store, _everything(s3, on_s3)).ok
    back = rayform.Client(tmp_path / "back")
    down = push(s3, s.id, back, progress=False)
    assert down.copied == up.copied
    home = back.slices.get(s.id)
    assert (home.digest, [p.digest for p in back.packs.list(home)]) == (s.digest, [p.digest for p in src.packs.list(s)])
    assert [(r.id, r.version) for r in back.segments.list()] == [(r.id, r.version) for r in src.segments.list()]
    assert verify(back.store, _everything(back, home)).ok


def test_a_push_cut_by_the_source_resumes_where_it_stopped(packed_small, s3_store_url, s3_endpoint, tmp_path):
    src, s = packed_small
    url, options = s3_store_url
    s3 = rayform.Client(url, storage_options=options, cache=tmp_path / "cache")
    push(src, s.id, s3, progress=False)
    shard = src.packs.list(s)[0].shards[-1].sha256
    fresh = rayform.Client(url, storage_options=options, cache=tmp_path / "cache2")  # nothing cached
    back = rayform.Client(tmp_path / "back")
    s3_endpoint.fail_gets(shard, 1000, status=403)  # the source refuses one blob: the push stops
    try:
        with pytest.raises(StoreError):
            push(fresh, s.id, back, progress=False, threads=1)
    finally:
        s3_endpoint.fail_gets(shard, 0)
    arrived = {b.digest for b in back.store.backend.list_blobs()}
    total = len({r.blob for r in _everything(src, s)})
    assert 0 < len(arrived) < total and shard not in arrived
    with pytest.raises(SliceNotFound):
        back.slices.get(s.id)
    resumed = push(fresh, s.id, back, progress=False)
    assert (resumed.copied, resumed.present) == (total - len(arrived), len(arrived))
    assert verify(back.store, _everything(back, back.slices.get(s.id))).ok


def test_gc_on_s3_keeps_young_and_reachable_blobs_and_deletes_old_orphans(packed_small, s3_store_url, tmp_path):
    src, s = packed_small
    url, options = s3_store_url
    s3 = rayform.Client(url, storage_options=options, cache=tmp_path / "cache")
    push(src, s.id, s3, progress=False)
    orphan = s3.store.backend.put_blob(b"written by an ingest that has not written its ref yet")
    listed = {b.digest: b for b in s3.store.backend.list_blobs()}
    assert listed[orphan].modified is not None and abs(listed[orphan].modified - time.time()) < 600
    now = collect(s3, delete=True)
    assert now.garbage == [] and now.young == 1 and s3.store.has_blob(orphan)
    later = collect(s3, delete=True, now=time.time() + 2 * 3600)  # the same store two hours on
    assert [b.digest for b in later.garbage] == [orphan] and not s3.store.has_blob(orphan)
    assert verify(s3.store, _everything(s3, s3.slices.get(s.id))).ok


def test_a_slice_pushed_to_s3_trains_from_there(packed_small, s3_store_url, tmp_path):
    torch = pytest.importorskip("torch")
    src, s = packed_small
    url, options = s3_store_url
    push(src, s.id, rayform.Client(url, storage_options=options, cache=tmp_path / "c1"), progress=False)
    remote = rayform.Client(url, storage_options=options, cache=tmp_path / "c2")
    ds = rayform.torch.EpisodeDataset(remote.slices.get(s.id), obs=["cam0/rgb", "joints/position"],
                                      action="joints/position_delta", fps=15)
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert batch["cam0/rgb"].shape == (4, 3, 32, 32) and batch["action"].shape[:2] == (4, 16)
