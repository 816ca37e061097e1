"""The whole write path against a real S3 endpoint on loopback: demo, slice, pack, verify."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.ops.references import pack_closure, segment_version, slice_closure
from rayform.ops.verify import verify

pytestmark = pytest.mark.s3


def test_pack_into_s3_gives_the_same_shards_as_local(s3_store_url, tmp_path):
    url, options = s3_store_url
    config = DemoConfig(episodes=2, seconds=2.0, seed=11, image_size=64)
    remote = rayform.Client(url, storage_options=options)
    local = rayform.Client(tmp_path / "store")
    slices = []
    for c in (remote, local):
        slices.append(c.slices.create(ingest_demo(c, "lab", config)))
    assert slices[0].id == slices[1].id  # content addressing: same data, same id, any store
    packs = [c.pack(s, 15, workers=2, progress=False, shard_bytes=100_000) for c, s in zip((remote, local), slices)]
    assert [x.sha256 for x in packs[0].shards] == [x.sha256 for x in packs[1].shards]

    again = rayform.Client(url, storage_options=options).slices.get(slices[0].id)
    assert again == slices[0]
    report = verify(remote.store, [*slice_closure(again), *pack_closure(packs[0])])
    assert report.ok and report.blobs > 10


def test_unknown_slice_on_s3_names_the_store_without_credentials(s3_store_url):
    url, options = s3_store_url
    client = rayform.Client(url, storage_options=options)
    with pytest.raises(rayform.SliceNotFound) as e:
        client.slices.get("slc_12345678")
    assert url in str(e.value) and "testing" not in str(e.value)


def test_the_cli_reaches_an_s3_store_through_storage_options_alone(s3_demo, tmp_path):
    """-o options are fsspec's storage options: the endpoint and the keys, no environment needed."""
    import os
    import subprocess
    import sys

    url, options, slice_id = s3_demo
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    flags = [x for k, v in options.items() for x in ("-o", f"{k}={v}")]
    r = subprocess.run([sys.executable, "-m", "rayform.cli.main", "slices", "ls", "--store", url, *flags,
                        "--cache", str(tmp_path / "cache")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and slice_id in r.stdout, r.stderr


def _add_one(url: str, options: dict, name: str) -> None:
    t = np.arange(10, dtype=np.int64) * 100_000_000
    joints = rayform.ArrayStream("j", t, np.ones((10, 1), np.float32))
    rayform.Client(url, storage_options=options).segments.add("lab", name, [joints])


def test_a_long_lived_process_sees_what_another_wrote_since_it_listed(s3_store_url):
    """s3fs keeps every listing it makes and answers later lookups from it: a catalog part
    another process wrote after this one listed the site read as "not found" for the rest of the
    process, so the catalog lacked its rows and gc's walk passed over them (a gc looping beside
    an ingest deleted every older segment's bundle). The store asks S3 every time."""
    from rayform.ops.gc import reachable

    url, options = s3_store_url
    client = rayform.Client(url, storage_options=options)
    _add_one(url, options, "first")
    assert [r.name for r in client.segments.list("lab")] == ["first"]
    assert not client.store.has_ref("refs/catalog/lab/20000101T000000000000Z-00000000.json")  # a miss, as gc's own
    writer = multiprocessing.get_context("spawn").Process(target=_add_one, args=(url, options, "second"))
    writer.start()
    writer.join(120)
    assert writer.exitcode == 0
    assert sorted(r.name for r in client.segments.list("lab")) == ["first", "second"]
    assert all(client.store.has_ref(key) for key in client.store.list_refs("refs/catalog"))
    second = next(r for r in client.segments.list("lab") if r.name == "second")
    assert {r.blob for r in segment_version(client.store, second.id, second.version)} <= reachable(client)
