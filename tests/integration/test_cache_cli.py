"""``rayform cache``, ``cache prune`` and ``cache clean`` on a cache filled from S3, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rayform.cache.directory import ShardCache
from rayform.ops.pull import cached_blobs_of

pytestmark = [pytest.mark.s3]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", *args], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)


def test_prune_and_clean_a_cache(s3_demo, tmp_path):
    url, options, slice_id = s3_demo
    cache = tmp_path / "cache"
    remote = ["--store", url, "--cache", str(cache), *(f"-o{k}={v}" for k, v in options.items())]
    assert _run("pull", slice_id, *remote).returncode == 0
    size, files = ShardCache(cache).size()
    shown = _run("cache", "--cache", str(cache))
    assert shown.returncode == 0 and slice_id in shown.stdout and "whole" in shown.stdout

    packed = sum((cache / "blobs" / d[:2] / d).stat().st_size for d in cached_blobs_of(ShardCache(cache), slice_id))
    target = packed // 2  # less than the pack's blobs: whatever goes first, some of the pack goes
    pruned = _run("cache", "prune", "--to", f"{target}B", "--cache", str(cache))
    assert pruned.returncode == 0, pruned.stderr
    after, left = ShardCache(cache).size()
    assert after <= target and left < files
    assert f"evicted {files - left} blobs" in pruned.stdout and "partial" in _run("cache", "--cache", str(cache)).stdout

    cleaned = _run("cache", "clean", slice_id, "--cache", str(cache))
    assert cleaned.returncode == 0, cleaned.stderr
    assert "evicted" in cleaned.stdout and cached_blobs_of(ShardCache(cache), slice_id) == set()
    again = _run("cache", "clean", slice_id, "--cache", str(cache))
    assert again.returncode == 0 and "holds no pack of it" in again.stdout

    everything = _run("cache", "clean", "--cache", str(cache))
    assert everything.returncode == 0 and ShardCache(cache).size() == (0, 0)
    assert _run("cache", "prune", "--to", "lots", "--cache", str(cache)).returncode == 2


def test_offline_listings_show_what_the_cache_holds_after_a_pull(s3_demo, tmp_path):
    url, options, slice_id = s3_demo
    cache = tmp_path / "cache"
    remote = ["--store", url, "--cache", str(cache), *(f"-o{k}={v}" for k, v in options.items())]
    online = _run("segments", "ls", *remote)
    assert _run("pull", slice_id, *remote).returncode == 0
    offline = dict(os.environ, RAYFORM_OFFLINE="1")

    def listed(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", *args, *remote], capture_output=True,
                              text=True, env=offline, timeout=300)

    segments = listed("segments", "ls")
    assert segments.returncode == 0 and "no segments" not in segments.stdout, segments.stdout + segments.stderr
    assert segments.stdout.startswith(f"offline: the segments the cache {cache} holds of {url}")
    assert [line.split()[0] for line in segments.stdout.splitlines()[2:]] == \
        [line.split()[0] for line in online.stdout.splitlines()[1:]]  # the slice's segments: all of them here
    slices = listed("slices", "ls")
    assert slices.returncode == 0 and slices.stdout.startswith("offline: the slices the cache") and slice_id in slices.stdout
