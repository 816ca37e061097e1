"""A hostile or absent S3 store on the loopback endpoint: no unverified byte reaches the caller,
offline means not one request, keys with ``..`` land nowhere, and a missing bucket says so."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rayform
from hostile import run_cli, unchanged
from rayform.cache.directory import ShardCache
from rayform.errors import IntegrityError

pytestmark = pytest.mark.s3


def _client(s3_demo, cache_dir):
    url, options, slice_id = s3_demo
    client = rayform.Client(url, storage_options=options, cache=cache_dir)
    return client, client.slices.get(slice_id)


def _stream(s):
    return rayform.torch.StreamingEpisodeDataset(s, obs=["cam0/rgb", "joints/position"], action="joints/position_delta",
                                                 fps=15, shuffle=rayform.torch.ShuffleConfig(window=0))


def test_a_flipped_bit_in_a_streamed_shard_never_reaches_the_caller(s3_demo, tmp_path):
    """One bit flipped inside a JPEG in the middle of a shard: every sample yielded is identical
    to the good store's, and the stream stops with an IntegrityError at that chunk."""
    import boto3

    url, options, _ = s3_demo
    client, s = _client(s3_demo, tmp_path / "reference-cache")
    reference = {}
    for x in _stream(s):
        reference[(x["meta"]["segment"], int(x["t_ns"]))] = x["cam0/rgb"].numpy().copy()

    client, s = _client(s3_demo, tmp_path / "cache")
    ds = _stream(s)
    info = ds.pack.shards[0]
    first = ds._pack_readers[0].rows(np.arange(0, info.samples))
    col = ds.pack.member_column("cam0.rgb.jpg")
    row = first[len(first) // 2]
    at = int(row[col] + row[col + 1] // 2)  # inside the middle sample's JPEG: it would still decode
    bucket, prefix = url[len("s3://"):].split("/", 1)
    key = f"{prefix}/blobs/{info.sha256[:2]}/{info.sha256}"
    s3 = boto3.client("s3", endpoint_url=options["endpoint_url"], region_name="us-east-1")
    good = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    bad = bytearray(good)
    bad[at] ^= 0x01
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(bad))
    yielded = 0
    try:
        with pytest.raises(IntegrityError, match=r"shard 0 .*chunk \d+ .*nothing from that chunk on was used"):
            for x in ds:
                assert np.array_equal(x["cam0/rgb"].numpy(), reference[(x["meta"]["segment"], int(x["t_ns"]))])
                yielded += 1
        assert not ShardCache(tmp_path / "cache").has(info.sha256)
    finally:
        s3.put_object(Bucket=bucket, Key=key, Body=good)
    assert yielded < len(reference)


COMMANDS = [
    ("demo", "--episodes", "1", "--seconds", "1"),
    ("segments", "ls"),
    ("slices", "ls"),
    ("slices", "show", "SLICE"),
    ("slices", "create", "--site", "lab"),
    ("pack", "SLICE", "--fps", "15"),
    ("pull", "SLICE"),
    ("verify", "SLICE"),
    ("ingest", "hdf5", "HDF5", "--site", "x", "--fps", "10"),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_offline_every_command_makes_no_request(s3_demo, s3_endpoint, tmp_path, monkeypatch, command):
    """With RAYFORM_OFFLINE=1 and a cold cache, not one request reaches the store: reads,
    listings and writes are all refused with one line and exit 2."""
    import h5py

    url, options, slice_id = s3_demo
    source = tmp_path / "episode.hdf5"
    with h5py.File(source, "w") as f:
        f["action"] = np.zeros((5, 2), np.float32)
        f["observations/qpos"] = np.zeros((5, 2), np.float32)
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cold-cache"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", options["endpoint_url"])
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    args = [slice_id if a == "SLICE" else str(source) if a == "HDF5" else a for a in command]
    s3_endpoint.reset_counts()
    code, err = run_cli("--store", url, *args)
    assert s3_endpoint.count() == 0, s3_endpoint.requests
    assert code == 2 and len(err.strip().splitlines()) == 1 and "RAYFORM_OFFLINE" in err, err


def test_offline_after_a_pull_reads_the_cache_and_lists_what_it_holds(s3_demo, s3_endpoint, tmp_path, monkeypatch):
    url, options, slice_id = s3_demo
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", options["endpoint_url"])
    assert run_cli("--store", url, "pull", slice_id)[0] == 0
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    s3_endpoint.reset_counts()
    for args in (["slices", "show", slice_id], ["slices", "ls"], ["verify", slice_id]):
        code, err = run_cli("--store", url, *args)
        assert code in (0, 2) and "Traceback" not in err
    code, _ = run_cli("--store", url, "slices", "show", slice_id)
    assert code == 0
    assert s3_endpoint.count() == 0, s3_endpoint.requests


def test_a_missing_bucket_is_an_error_not_an_empty_store(s3_endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.url)
    for args in (["segments", "ls"], ["slices", "ls"]):
        code, err = run_cli("--store", "s3://no-such-bucket-here/store", *args)
        assert code == 2 and "no such bucket" in err and len(err.strip().splitlines()) == 1, err


def test_listing_keys_with_dot_dots_write_nothing_outside_the_cache(s3_store_url, tmp_path, monkeypatch):
    import boto3

    url, options = s3_store_url
    cache = tmp_path / "around" / "cache"
    (tmp_path / "around").mkdir()
    (tmp_path / "around" / "victim.json").write_text("{}")
    client = rayform.Client(url, storage_options=options, cache=cache)
    bucket, prefix = url[len("s3://"):].split("/", 1)
    s3 = boto3.client("s3", endpoint_url=options["endpoint_url"], region_name="us-east-1")
    body = json.dumps({"id": "seg_000000000000", "site": "demo", "name": "x", "versions": ["0" * 64]}).encode()
    for key in ["refs/segments/demo/../../../../x.json", "refs/segments/demo/../../../../../victim.json",
                "refs/segments/demo/%2e%2e/y.json", "refs/slices/../../../../x.json"]:
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=body)
    with unchanged(tmp_path, cache):
        assert client.segments.list() == []
        assert client.slices.list() == []
    assert not [p for p in tmp_path.rglob("x.json")]
