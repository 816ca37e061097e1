"""The cached view of a store: verified local copies, refs for offline use, the offline rule."""

from __future__ import annotations

import os
import uuid

import pytest

import rayform
from rayform.cache.directory import ShardCache
from rayform.cache.store_view import CachedStore, StoreRef
from rayform.errors import BlobNotFound, IntegrityError, OfflineError
from rayform.ops.references import pack_closure, slice_closure
from rayform.recordings.slices import Slices
from rayform.store.store import Store


def _remote(tmp_path) -> CachedStore:
    return CachedStore(Store(f"memory://cached-{uuid.uuid4().hex[:8]}"), ShardCache(tmp_path / "cache"))


def test_the_store_knows_nothing_of_caches_or_offline(tmp_path, monkeypatch):
    store = Store(f"memory://bare-{uuid.uuid4().hex[:8]}")
    digest = store.put_blob(b"remote")
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    assert store.get_blob(digest) == b"remote"  # the rule is the view's, not the backend's
    assert not hasattr(store, "cache") and not hasattr(store, "offline")


def test_a_remote_blob_is_fetched_once_into_the_cache_and_verified(tmp_path):
    view = _remote(tmp_path)
    digest = view.put_blob(b"x" * 10_000)
    assert view.local_copy(digest) is None
    path = view.local_blob(digest)
    assert path == view.cache.blob_path(digest) and path.read_bytes() == b"x" * 10_000
    view.backend.fs.rm(view.backend.blob_path(digest))  # gone from the store: the copy serves
    assert view.get_blob(digest) == b"x" * 10_000


def test_a_bad_cached_copy_is_dropped_and_fetched_again(tmp_path):
    view = _remote(tmp_path)
    digest = view.put_blob(b"y" * 5000)
    path = view.local_blob(digest)
    os.chmod(path, 0o644)
    path.write_bytes(b"z" * 5000)
    fresh = CachedStore(view.backend, ShardCache(tmp_path / "cache"))  # a new process: not verified yet
    import rayform.cache.marks as files

    files._VERIFIED.clear()
    assert fresh.local_blob(digest).read_bytes() == b"y" * 5000


def test_a_corrupt_remote_blob_never_reaches_the_cache(tmp_path):
    view = _remote(tmp_path)
    digest = view.put_blob(b"good" * 1000)
    view.backend.fs.pipe_file(view.backend.blob_path(digest), b"evil" * 1000)
    with pytest.raises(IntegrityError, match="not cached"):
        view.local_blob(digest)
    assert not view.cache.has(digest)


def test_a_local_store_is_its_own_local_copy(tmp_path):
    view = CachedStore(Store(tmp_path / "store"), ShardCache(tmp_path / "cache"))
    assert view.cache is None
    digest = view.put_blob(b"local")
    assert view.local_blob(digest) == tmp_path / "store" / "blobs" / digest[:2] / digest
    assert not (tmp_path / "cache").exists()


def test_offline_reads_the_cache_and_nothing_else(tmp_path, monkeypatch):
    view = _remote(tmp_path)
    kept, other = view.put_blob(b"kept"), view.put_blob(b"other")
    view.put_ref("refs/slices/slc_00000001.json", {"id": "slc_00000001", "manifest": kept})
    view.local_blob(kept)
    assert view.get_ref("refs/slices/slc_00000001.json")["manifest"] == kept  # now cached too
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    view.backend.fs.rm(view.backend.root, recursive=True)  # offline must not need the store
    assert view.get_blob(kept) == b"kept"
    assert view.get_ref("refs/slices/slc_00000001.json")["manifest"] == kept
    assert list(view.list_refs("refs/slices")) == ["refs/slices/slc_00000001.json"]
    with pytest.raises(OfflineError, match=f"blob {other[:16]}: not in the cache .*RAYFORM_OFFLINE=1"):
        view.get_blob(other)
    with pytest.raises(OfflineError, match="slc_00000002: not in the cache") as info:
        view.get_ref("refs/slices/slc_00000002.json")
    assert "Run:" not in str(info.value)  # the store says what is missing; which command fetches it is
    with pytest.raises(OfflineError, match="slc_00000002: not in the cache.*Run: rayform pull slc_00000002"):
        Slices(view).get("slc_00000002")  # the slices' to say, who know which slice it is
    with pytest.raises(OfflineError, match="writing a blob: RAYFORM_OFFLINE=1 forbids"):
        view.put_blob(b"new")


def test_offline_still_reads_and_writes_a_local_store(tmp_path, monkeypatch):
    view = CachedStore(Store(tmp_path / "store"))
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    digest = view.put_blob(b"local")
    assert view.get_blob(digest) == b"local"


@pytest.mark.s3
def test_offline_mode_reads_nothing_from_s3(s3_store_url, s3_endpoint, monkeypatch, tmp_path):
    url, options = s3_store_url
    view = CachedStore(Store(url, options), ShardCache(tmp_path / "cache"))
    digest = view.put_blob(b"remote")
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    s3_endpoint.reset_counts()
    with pytest.raises(OfflineError, match="RAYFORM_OFFLINE"):
        view.get_blob(digest)
    assert s3_endpoint.count() == 0


def test_a_store_ref_opens_the_same_view_in_another_process(tmp_path):
    view = _remote(tmp_path)
    again = view.ref.open()
    assert isinstance(view.ref, StoreRef) and again.url == view.url and again.cache.root == view.cache.root


def test_the_client_builds_the_view_with_the_cache_it_is_given(tmp_path):
    client = rayform.Client(f"memory://client-{uuid.uuid4().hex[:8]}", cache=tmp_path / "mine")
    assert isinstance(client.store, CachedStore) and client.store.cache.root == tmp_path / "mine"
    assert rayform.Client(tmp_path / "store", cache=tmp_path / "mine").store.cache is None


@pytest.mark.parametrize("where", ["local", "remote"])
def test_a_missing_shard_is_the_same_error_through_both_datasets(demo_client, tmp_path, where):
    pytest.importorskip("torch")
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False)
    if where == "remote":  # the same pack in a memory store, read through a fresh cache
        remote = rayform.Client(f"memory://gone-{uuid.uuid4().hex[:8]}", cache=tmp_path / "cache")
        for digest in dict.fromkeys(r.blob for r in [*slice_closure(s), *pack_closure(pack)]):
            remote.store.put_blob(client.store.get_blob(digest))
        for key in list(client.store.list_refs("refs")):
            remote.store.put_ref(key, client.store.get_ref(key))
        client = remote
    for shard in pack.shards:
        client.store.backend.fs.rm(client.store.backend.blob_path(shard.sha256))
    sl = client.slices.get(s.id)
    kw = dict(obs=["cam0/rgb"], action="joints/position_delta", fps=15)
    said = r"shard \d+ \([0-9a-f]{16}\) at 15 fps: not in"
    with pytest.raises(BlobNotFound, match=said):
        rayform.torch.EpisodeDataset(sl, **kw)[0]
    with pytest.raises(BlobNotFound, match=said):
        list(rayform.torch.StreamingEpisodeDataset(sl, **kw, shuffle=rayform.torch.ShuffleConfig(window=0)))
