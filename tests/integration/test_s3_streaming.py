"""StreamingEpisodeDataset against a real S3 endpoint on loopback, with real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as tmp
from torch.utils.data import DataLoader

import rayform
from rayform.cache.directory import ShardCache
from rayform.errors import IntegrityError, OfflineError, StoreError
from rayform.store.content import hash_file
from rayform.torch.tensors import to_torch

pytestmark = [pytest.mark.s3, pytest.mark.timeout(300)]


def _slice(s3_demo, cache_dir, endpoint_url=None, retry=rayform.Retry()):
    url, options, slice_id = s3_demo
    options = dict(options, endpoint_url=endpoint_url or options["endpoint_url"])
    client = rayform.Client(url, storage_options=options, cache=cache_dir, retry=retry)
    return client.slices.get(slice_id)


def _stream(s, **kw):
    return rayform.torch.StreamingEpisodeDataset(s, obs=["cam0/rgb", "joints/position"],
                                                 action="joints/position_delta", fps=15, **kw)


def _keys(samples):
    return [f"{seg}:{int(t)}" for seg, t in samples]


def _batches_keys(loader):
    return [f"{s}:{int(t)}" for b in loader for s, t in zip(b["meta"]["segment"], b["t_ns"])]


def _rank(rank, world, port, s3_demo, cache_root, out):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    s = _slice(s3_demo, Path(cache_root) / f"rank{rank}")
    ds = _stream(s)
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    seen = {}
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        seen[epoch] = _batches_keys(loader)
    Path(out, f"rank{rank}.json").write_text(json.dumps({"len": len(ds), "seen": seen, "total": ds.pack.samples,
                                                         "shards": len(ds.pack.shards)}))
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.dist
def test_two_ranks_two_workers_disjoint_cover_equal_counts(s3_demo, tmp_path):
    tmp.start_processes(_rank, args=(2, _free_port(), s3_demo, str(tmp_path / "cache"), str(tmp_path)), nprocs=2,
                        join=True, start_method="spawn")
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    total = r0["total"]
    assert r0["shards"] % 4 != 0 or total % 4 != 0  # shard and sample counts that do not divide evenly
    for epoch in ("0", "1"):
        a, b = r0["seen"][epoch], r1["seen"][epoch]
        assert len(a) == len(b) == r0["len"] == -(-total // 2)
        assert len(set(a) | set(b)) == total
        assert len(a) + len(b) - total == (2 - total % 2) % 2  # only the padding repeats
    assert r0["seen"]["0"] != r0["seen"]["1"]


ORDER = '''
import json, sys, rayform
from rayform.cache.directory import ShardCache
from torch.utils.data import DataLoader
url, options, sid, cache, epoch = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
c = rayform.Client(url, storage_options=options, cache=cache)
ds = rayform.torch.StreamingEpisodeDataset(c.slices.get(sid), obs=["joints/position"], fps=15, seed=5,
                                           split=rayform.torch.Split(rank=1, world_size=2))
ds.set_epoch(epoch)
print(json.dumps([f"{s}:{int(t)}" for b in DataLoader(ds, batch_size=4, num_workers=2)
                  for s, t in zip(b["meta"]["segment"], b["t_ns"])]))
'''


def test_same_order_in_new_processes_and_a_new_order_next_epoch(s3_demo, tmp_path):
    url, options, sid = s3_demo

    def order(epoch, cache):
        r = subprocess.run([sys.executable, "-c", ORDER, url, json.dumps(options), sid, str(tmp_path / cache),
                            str(epoch)], capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)

    first = order(3, "a")
    assert first == order(3, "b")  # a cold cache and a fresh process: the same order
    assert first == order(3, "a")  # and from the warm cache
    other = order(4, "a")
    assert other != first and len(other) == len(first)


def test_resumption_continues_exactly_where_it_stopped(s3_demo, tmp_path):
    s = _slice(s3_demo, tmp_path / "cache")
    whole = _stream(s, seed=2)
    whole.set_epoch(1)
    expected = _keys((x["meta"]["segment"], x["t_ns"]) for x in whole)

    first = _stream(s, seed=2)
    first.set_epoch(1)
    it = iter(first)
    head = [next(it) for _ in range(23)]
    state = first.state_dict()
    del it  # the interrupted run

    resumed = _stream(s, seed=2)
    resumed.load_state_dict(state)
    tail = list(resumed)
    got = _keys((x["meta"]["segment"], x["t_ns"]) for x in head + tail)
    assert got == expected


def test_the_second_epoch_makes_no_request(s3_demo, s3_endpoint, tmp_path):
    s = _slice(s3_demo, tmp_path / "cache")
    ds = _stream(s)
    loader = DataLoader(ds, batch_size=8, num_workers=2)
    s3_endpoint.reset_counts()
    first = _batches_keys(loader)
    assert s3_endpoint.count("GET") >= len(ds.pack.shards)
    for shard in ds.pack.shards:  # streamed into the cache and verified
        assert hash_file(ShardCache(tmp_path / "cache").blob_path(shard.sha256)) == shard.sha256
    s3_endpoint.reset_counts()
    ds.set_epoch(1)
    second = _batches_keys(loader)
    assert sorted(second) == sorted(first) and second != first
    assert s3_endpoint.count() == 0, s3_endpoint.requests


def test_a_connection_cut_mid_shard_still_yields_every_sample_once(s3_demo, s3_endpoint, tmp_path):
    from tests.conftest import CuttingProxy

    proxy = CuttingProxy(s3_endpoint.port, after=40_000, cuts=3)
    try:
        s = _slice(s3_demo, tmp_path / "cache", endpoint_url=proxy.url, retry=rayform.Retry(budget_s=30, backoff_s=0.01))
        ds = _stream(s)
        keys = _keys((x["meta"]["segment"], x["t_ns"]) for x in ds)
    finally:
        proxy.stop()
    assert proxy.cut >= 1
    assert len(keys) == len(set(keys)) == ds.pack.samples


def test_a_5xx_mid_shard_is_retried_and_the_read_resumes_at_its_byte(s3_demo, s3_endpoint, tmp_path):
    from tests.conftest import CuttingProxy

    proxy = CuttingProxy(s3_endpoint.port, after=40_000, cuts=1)
    try:
        s = _slice(s3_demo, tmp_path / "cache", endpoint_url=proxy.url, retry=rayform.Retry(budget_s=30, backoff_s=0.01))
        ds = _stream(s)
        s3_endpoint.reset_counts()
        # one response is cut mid-shard; its resumption is refused twice with a 503, then served
        s3_endpoint.fail_gets("/blobs/", times=2, resumed_only=True)
        keys = _keys((x["meta"]["segment"], x["t_ns"]) for x in ds)
    finally:
        proxy.stop()
        s3_endpoint.fail_gets("/blobs/", times=0)
    assert proxy.cut == 1
    assert len(keys) == len(set(keys)) == ds.pack.samples
    resumed = [(path, r) for path, r in s3_endpoint.ranges if not r.startswith("bytes=0-")]
    assert len(resumed) == 3 and len({path for path, _ in resumed}) == 1  # 503, 503, then served
    assert s3_endpoint.failures_left("/blobs/") == 0
    for shard in ds.pack.shards:  # whole and verified in the cache
        assert hash_file(ShardCache(tmp_path / "cache").blob_path(shard.sha256)) == shard.sha256


def test_a_read_that_keeps_failing_resumes_at_its_byte_then_names_the_shard(s3_demo, tmp_path, monkeypatch):
    import rayform.cache.transfer as shardstream

    monkeypatch.setattr(shardstream, "STREAM_CHUNK", 16384)  # many reads a shard, so one fails mid-shard
    s = _slice(s3_demo, tmp_path / "cache", retry=rayform.Retry(budget_s=0.3, backoff_s=0.01))
    ds = _stream(s, shuffle=rayform.torch.ShuffleConfig(window=0))
    opens = []
    from rayform.store.store import Store

    real_open = Store.read_from

    class Flaky:
        def __init__(self, f):
            self.f, self.n = f, 0

        def read(self, n=-1):
            self.n += 1
            if self.n == 2:
                raise ConnectionResetError("connection reset by peer")
            return self.f.read(n)

        def close(self):
            self.f.close()

    def flaky_open(self, digest, start, *args):
        opens.append(start)
        return Flaky(real_open(self, digest, start, *args))

    monkeypatch.setattr(Store, "read_from", flaky_open)
    keys = _keys((x["meta"]["segment"], x["t_ns"]) for x in ds)
    assert len(keys) == len(set(keys)) == ds.pack.samples
    sizes = {sh.bytes for sh in ds.pack.shards}
    assert any(0 < pos < min(sizes) for pos in opens)  # resumed at the byte where it stopped

    class Dead:
        def read(self, n=-1):
            raise ConnectionResetError("gone")

        def close(self):
            pass

    cold = _stream(_slice(s3_demo, tmp_path / "cold", retry=rayform.Retry(budget_s=0.3, backoff_s=0.01)))
    monkeypatch.setattr(Store, "read_from", lambda self, *args: Dead())  # its shards only: the rest came
    with pytest.raises(StoreError, match=r"shard \d+ \([0-9a-f]{16}\) at 15 fps from s3://.*after \d+ tries "
                                         r"over [\d.]+ s with no byte arriving"):
        list(cold)
    assert not any(ShardCache(tmp_path / "cold").has(sh.sha256) for sh in cold.pack.shards)
    assert not [p for p in (tmp_path / "cold").rglob(".tmp-*")]


@pytest.mark.parametrize("where", ["middle", "padding"])
def test_a_shard_whose_bytes_do_not_match_fails_clearly_and_is_not_kept(s3_demo, s3_endpoint, tmp_path, where):
    import boto3

    url, options, sid = s3_demo
    s = _slice(s3_demo, tmp_path / "cache")
    ds = _stream(s, shuffle=rayform.torch.ShuffleConfig(window=0))
    shard = ds.pack.shards[0].sha256
    bucket, prefix = url[len("s3://"):].split("/", 1)
    key = f"{prefix}/blobs/{shard[:2]}/{shard}"
    s3 = boto3.client("s3", endpoint_url=options["endpoint_url"], region_name="us-east-1")
    good = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    bad = bytearray(good)
    bad[len(bad) // 2 if where == "middle" else len(bad) - 1] ^= 0x10  # padding: only the hash can tell
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(bad))
    try:
        # the flipped byte is caught by its chunk's digest, before the chunk is handed over
        with pytest.raises(IntegrityError, match=f"shard 0 \\({shard[:16]}\\).*chunk .*nothing from that chunk on was "
                                                 "used, and nothing of it was cached"):
            list(ds)
        assert not ShardCache(tmp_path / "cache").has(shard)
    finally:
        s3.put_object(Bucket=bucket, Key=key, Body=good)


def test_offline_holds_for_streaming(s3_demo, tmp_path, monkeypatch):
    s = _slice(s3_demo, tmp_path / "cache")
    ds = _stream(s)
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    with pytest.raises(OfflineError, match=f"{s.id}: shard .* Run: rayform pull {s.id} --fps 15"):
        next(iter(ds))
    monkeypatch.delenv("RAYFORM_OFFLINE")
    n = len(list(ds))
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    assert len(list(ds)) == n  # after one streamed epoch, everything is cached


def test_batched_streaming_equals_the_samples_collated(s3_demo, tmp_path):
    from torch.utils.data import default_collate

    s = _slice(s3_demo, tmp_path / "cache")
    plain = _keys((x["meta"]["segment"], x["t_ns"]) for x in _stream(s, seed=4))
    ds = _stream(s, seed=4, batch_size=10)
    batched = list(DataLoader(ds, batch_size=None))
    assert sum(len(b["t_ns"]) for b in batched) == len(ds) == -(-len(plain) // 10) * 10  # whole global batches
    got = _keys((seg, t) for b in batched for seg, t in zip(b["meta"]["segment"], b["t_ns"]))
    assert set(got) == set(plain)
    one_by_one = [to_torch(ds._build(raw)) for raw in next(iter(ds.raw_steps()))[1]]
    manual = default_collate(one_by_one)
    for key in ("cam0/rgb", "joints/position", "action", "action_is_pad", "t_ns"):
        assert torch.equal(batched[0][key], manual[key]), key
    assert batched[0]["meta"]["segment"] == manual["meta"]["segment"]


@pytest.mark.parametrize("persistent", [True, False])
def test_stateful_dataloader_with_workers_resumes_a_later_epoch_exactly(s3_demo, tmp_path, persistent):
    """torchdata's StatefulDataLoader keeps each worker's state: an interrupted epoch (the
    second, after a whole first one with the same workers) goes on where it stopped."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    s = _slice(s3_demo, tmp_path / "cache")

    def loader(ds):
        return stateful.StatefulDataLoader(ds, batch_size=4, num_workers=2, persistent_workers=persistent)

    whole = _stream(s, seed=3)
    expected = []
    whole_loader = loader(whole)
    for epoch in (0, 1):
        whole.set_epoch(epoch)
        expected.append(_batches_keys(whole_loader))

    first = _stream(s, seed=3)
    first_loader = loader(first)
    first.set_epoch(0)
    assert _batches_keys(first_loader) == expected[0]
    first.set_epoch(1)
    head, it = [], iter(first_loader)
    for _ in range(5):
        b = next(it)
        head += [f"{seg}:{int(t)}" for seg, t in zip(b["meta"]["segment"], b["t_ns"])]
    state = json.loads(json.dumps(first_loader.state_dict()))  # a checkpoint is plain data
    del it, first_loader  # the interrupted run

    resumed = _stream(s, seed=3)
    resumed_loader = loader(resumed)
    resumed_loader.load_state_dict(state)
    tail = _batches_keys(resumed_loader)
    assert head + tail == expected[1]
    assert set(expected[1]) == set(expected[0]) and expected[1] != expected[0]


@pytest.mark.slow
def test_throttling_slows_the_stream_and_never_ends_it(s3_demo, s3_endpoint, tmp_path):
    """2 of every 3 blob GETs answer 503 Slow Down (in bursts of two), with 2 DataLoader
    workers fetching ahead through one cache: every sample arrives, in the order of a stream
    that was never throttled."""
    expected = _batches_keys(DataLoader(_stream(_slice(s3_demo, tmp_path / "calm"), batch_size=8), batch_size=None,
                                        num_workers=2))
    s3_endpoint.throttle("/blobs/", refuse=2, of=3)
    try:
        ds = _stream(_slice(s3_demo, tmp_path / "throttled", retry=rayform.Retry(backoff_s=0.01, max_backoff_s=0.05)),
                     batch_size=8)
        got = _batches_keys(DataLoader(ds, batch_size=None, num_workers=2))
        refused = s3_endpoint.refused
    finally:
        s3_endpoint.throttle(None)
    assert refused >= 10  # throttled for real, the shards' reads and the index's
    assert got == expected and len(set(got)) == ds.pack.samples
