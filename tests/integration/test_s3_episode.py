"""EpisodeDataset from a real S3 endpoint: forked workers, the cache, offline mode, pull."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader

import rayform
from rayform.cache.directory import ShardCache
from rayform.errors import OfflineError
from rayform.store.content import hash_file

pytestmark = pytest.mark.s3


def _client(s3_demo, cache_dir):
    url, options, _ = s3_demo
    client = rayform.Client(url, storage_options=options, cache=cache_dir)
    return client


def _dataset(client, slice_id):
    s = client.slices.get(slice_id)
    return rayform.torch.EpisodeDataset(s, obs=["cam0/rgb", "joints/position"], action="joints/position_delta", fps=15)


def test_forked_workers_read_s3_and_the_second_epoch_sends_no_request(s3_demo, s3_endpoint, tmp_path):
    client = _client(s3_demo, tmp_path / "cache")
    ds = _dataset(client, s3_demo[2])
    loader = DataLoader(ds, batch_size=16, num_workers=2, shuffle=True, multiprocessing_context="fork")
    s3_endpoint.reset_counts()
    first = sorted(int(t) for b in loader for t in b["t_ns"])
    assert s3_endpoint.count("GET") >= len(ds.pack.shards)  # the shards came from S3, in the workers
    assert len(first) == len(ds)
    s3_endpoint.reset_counts()
    ds.set_epoch(1)
    second = sorted(int(t) for b in loader for t in b["t_ns"])
    assert second == first
    assert s3_endpoint.count() == 0, s3_endpoint.requests


def test_offline_with_a_cold_cache_fails_clearly_and_works_after_pull(s3_demo, s3_endpoint, tmp_path):
    url, options, slice_id = s3_demo
    env = {**os.environ, "RAYFORM_STORE": url, "RAYFORM_CACHE_DIR": str(tmp_path / "cache"),
           "AWS_ENDPOINT_URL": options["endpoint_url"]}
    code = f'''
import rayform
c = rayform.Client()
s = c.slices.get("{slice_id}")
ds = rayform.torch.EpisodeDataset(s, obs=["cam0/rgb"], action="joints/position_delta", fps=15)
print("samples", len([ds[i] for i in range(len(ds))]))
'''
    s3_endpoint.reset_counts()
    cold = subprocess.run([sys.executable, "-c", code], env={**env, "RAYFORM_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=240)
    assert cold.returncode != 0
    last = cold.stderr.strip().splitlines()[-1]
    assert "OfflineError" in last and slice_id in last and f"rayform pull {slice_id}" in last
    assert s3_endpoint.count() == 0

    pulled = subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "pull", slice_id, "--fps", "15"],
                            env=env, capture_output=True, text=True, timeout=240)
    assert pulled.returncode == 0, pulled.stderr
    assert "fetched" in pulled.stdout and "0 already cached" in pulled.stdout
    again = subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "pull", slice_id], env=env,
                           capture_output=True, text=True, timeout=240)
    assert "fetched 0 blobs" in again.stdout  # resumable: nothing is fetched twice

    s3_endpoint.reset_counts()
    warm = subprocess.run([sys.executable, "-c", code], env={**env, "RAYFORM_OFFLINE": "1"}, capture_output=True,
                          text=True, timeout=240)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.startswith("samples ")
    assert s3_endpoint.count() == 0

    shown = subprocess.run([sys.executable, "-m", "rayform.cli.main", "cache"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert slice_id in shown.stdout and "whole" in shown.stdout and url in shown.stdout


def test_a_corrupted_cache_file_is_detected_and_replaced(s3_demo, tmp_path):
    cache_dir = tmp_path / "cache"
    client = _client(s3_demo, cache_dir)
    ds = _dataset(client, s3_demo[2])
    expected = ds[0]["joints/position"].clone()
    shard = ds.pack.shards[ds.readers[0].shard_of([ds.sample_ids([0])[0]])[0]].sha256
    path = ShardCache(cache_dir).blob_path(shard)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))

    code = f'''
import rayform, torch
from rayform.cache.directory import ShardCache
c = rayform.Client("{s3_demo[0]}", storage_options={s3_demo[1]!r}, cache="{cache_dir}")
ds = rayform.torch.EpisodeDataset(c.slices.get("{s3_demo[2]}"), obs=["cam0/rgb", "joints/position"],
                                  action="joints/position_delta", fps=15)
print(ds[0]["joints/position"].tolist())
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert torch.allclose(torch.tensor(eval(r.stdout)), expected)
    assert hash_file(path) == shard


def _fill(url, options, slice_id, cache_dir, barrier):
    client = rayform.Client(url, storage_options=options, cache=cache_dir)
    s = client.slices.get(slice_id)
    pack = client.packs.find(s, 15)
    barrier.wait()
    for shard in pack.shards:
        client.store.local_blob(shard.sha256)


def test_two_processes_filling_one_cache_at_once_leave_only_valid_files(s3_demo, tmp_path):
    url, options, slice_id = s3_demo
    cache_dir = tmp_path / "shared-cache"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_fill, args=(url, options, slice_id, cache_dir, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    files = [p for p in (cache_dir / "blobs").rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.name.startswith(".tmp-")]
    for p in files:
        assert hash_file(p) == p.name


def test_offline_error_when_the_slice_itself_was_never_seen(s3_demo, tmp_path, monkeypatch):
    client = _client(s3_demo, tmp_path / "cache")
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    with pytest.raises(OfflineError, match=f"{s3_demo[2]}: not in the cache.*rayform pull"):
        client.slices.get(s3_demo[2])
