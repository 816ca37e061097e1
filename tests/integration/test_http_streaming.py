"""StreamingEpisodeDataset from a plain http(s) store (a static file server on loopback)."""

from __future__ import annotations

import pytest

import rayform
from rayform.cache.directory import ShardCache
from rayform.store.content import hash_file


def _stream(url: str, slice_id: str, cache_dir, retry=rayform.Retry(), **kw) -> rayform.torch.StreamingEpisodeDataset:
    client = rayform.Client(url, cache=cache_dir, retry=retry)
    return rayform.torch.StreamingEpisodeDataset(client.slices.get(slice_id), obs=["cam0/rgb", "joints/position"],
                                                 action="joints/position_delta", fps=15, **kw)


def _keys(ds) -> list[str]:
    return [f"{x['meta']['segment']}:{int(x['t_ns'])}" for x in ds]


def test_each_shard_is_one_get_and_the_next_epoch_makes_none(http_demo, tmp_path):
    server, url, slice_id = http_demo
    ds = _stream(url, slice_id, tmp_path / "cache")
    server.reset_counts()
    keys = _keys(ds)
    assert len(keys) == len(set(keys)) == ds.pack.samples
    gets = server.blob_gets()
    shards = {f"/store/blobs/{sh.sha256[:2]}/{sh.sha256}" for sh in ds.pack.shards}
    assert sorted(path for path, _ in gets) == sorted(shards)  # one request a shard, nothing else
    assert {spec for _, spec in gets} == {"bytes=0-"}
    for sh in ds.pack.shards:
        assert hash_file(ShardCache(tmp_path / "cache").blob_path(sh.sha256)) == sh.sha256

    server.reset_counts()
    ds.set_epoch(1)
    assert sorted(_keys(ds)) == sorted(keys)
    assert server.requests == []


def test_a_connection_cut_mid_shard_resumes_at_its_byte(http_demo, tmp_path):
    from tests.conftest import CuttingProxy

    server, url, slice_id = http_demo
    proxy = CuttingProxy(server.port, after=50_000, cuts=2)
    try:
        ds = _stream(url.replace(server.url, proxy.url), slice_id, tmp_path / "cache",
                     retry=rayform.Retry(budget_s=30, backoff_s=0.01))
        server.reset_counts()
        keys = _keys(ds)
    finally:
        proxy.stop()
    assert proxy.cut == 2
    assert len(keys) == len(set(keys)) == ds.pack.samples
    resumed = [spec for _, spec in server.blob_gets() if spec != "bytes=0-"]
    assert len(resumed) == 2 and all(int(spec[len("bytes="):-1]) > 0 for spec in resumed)


@pytest.mark.parametrize("options", [{"headers": {"Authorization": "Bearer x"}}, {"client_kwargs": {"trust_env": True}}])
def test_an_http_store_with_request_options_streams_through_its_own_client(http_demo, tmp_path, options):
    server, url, slice_id = http_demo
    client = rayform.Client(url, storage_options=options, cache=tmp_path / "cache")
    ds = rayform.torch.StreamingEpisodeDataset(client.slices.get(slice_id), obs=["joints/position"], fps=15)
    server.reset_counts()
    assert len(_keys(ds)) == ds.pack.samples
    gets = server.blob_gets()
    assert gets and all(spec != "bytes=0-" for _, spec in gets)  # fsspec's ranged blocks, bounded ranges
