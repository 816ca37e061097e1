"""Keeping the shard cache within a size: least recently used first, never a pinned blob."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest

from rayform.cache import eviction
from rayform.cache.directory import ShardCache
from rayform.errors import InvalidInput


def _put(cache: ShardCache, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    w = cache.writer(digest, len(data))
    w.write(data)
    w.commit("test blob")
    return digest


def _touch(cache: ShardCache, digest: str, seconds_ago: float) -> None:
    path = cache.blob_path(digest)
    t = time.time_ns() - int(seconds_ago * 1e9)
    os.utime(path, ns=(t, path.stat().st_mtime_ns))


def test_prune_evicts_the_least_recently_used_first(tmp_path):
    cache = ShardCache(tmp_path)
    old, mid, new = (_put(cache, bytes([i]) * 1000) for i in range(3))
    for digest, age in ((old, 300), (mid, 200), (new, 100)):
        _touch(cache, digest, age)
    found = cache.prune(2000)
    assert (found.files, found.bytes, found.pinned) == (1, 1000, 0)
    assert not cache.has(old) and cache.has(mid) and cache.has(new)


def test_a_pinned_blob_is_never_evicted_and_a_pin_marks_it_recent(tmp_path):
    cache = ShardCache(tmp_path)
    a, b = _put(cache, b"a" * 1000), _put(cache, b"b" * 1000)
    _touch(cache, a, 300)
    _touch(cache, b, 200)
    pin = cache.pin(a)  # a is the oldest, but a reader holds it; pinning stamps it as just used
    assert pin is not None
    assert cache.blob_path(a).stat().st_atime_ns > cache.blob_path(b).stat().st_atime_ns
    found = cache.prune(0)
    assert (found.files, found.pinned) == (1, 1) and cache.has(a) and not cache.has(b)
    pin.release()
    assert cache.prune(0).files == 1 and not cache.has(a)


def test_a_pin_in_another_process_holds_the_blob(tmp_path):
    cache = ShardCache(tmp_path)
    digest = _put(cache, b"x" * 5000)
    code = ("import sys, time; from rayform.cache.directory import ShardCache; "
            f"p = ShardCache({str(tmp_path)!r}).pin({digest!r}); print('pinned', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "pinned"
        assert cache.prune(0).pinned == 1 and cache.has(digest)
    finally:
        holder.communicate("")
    assert cache.prune(0).files == 1 and not cache.has(digest)


def test_a_limit_makes_room_before_a_blob_arrives(tmp_path):
    cache = ShardCache(tmp_path, limit="2500B")
    first = _put(cache, b"1" * 1000)
    _touch(cache, first, 100)
    second = _put(cache, b"2" * 1000)
    third = _put(cache, b"3" * 1000)  # 3000 would not fit: the least recently used goes first
    assert not cache.has(first) and cache.has(second) and cache.has(third)
    assert cache.size() == (2000, 2)


def test_the_limit_comes_from_the_environment_and_a_bad_one_is_one_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYFORM_CACHE_LIMIT", "1.5GB")
    assert ShardCache(tmp_path).limit == 1_500_000_000
    assert ShardCache(tmp_path, limit="2GiB").limit == 2 << 30  # the parameter wins
    monkeypatch.setenv("RAYFORM_CACHE_LIMIT", "lots")
    with pytest.raises(InvalidInput, match="RAYFORM_CACHE_LIMIT 'lots'"):
        ShardCache(tmp_path)
    monkeypatch.delenv("RAYFORM_CACHE_LIMIT")
    assert ShardCache(tmp_path).limit is None


def test_clean_removes_named_blobs_or_everything(tmp_path):
    cache = ShardCache(tmp_path)
    a, b = _put(cache, b"a"), _put(cache, b"b")
    cache.put_ref("0123456789abcdef", "refs/slices/slc_01234567.json", b"{}")
    assert cache.clean([a]).files == 1 and not cache.has(a) and cache.has(b)
    found = cache.clean()
    assert found.files == 1 and not cache.has(b) and cache.store_ids() == []


def test_small_blobs_go_after_every_larger_one(tmp_path):
    cache = ShardCache(tmp_path)
    manifest, shard = _put(cache, b"m" * 100), _put(cache, b"s" * (eviction.SMALL + 1))
    _touch(cache, manifest, 300)  # older, but small: what says what the cache holds
    _touch(cache, shard, 100)
    assert cache.prune(eviction.SMALL).files == 1
    assert cache.has(manifest) and not cache.has(shard)
