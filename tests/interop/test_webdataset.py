"""A pack read through webdataset: the shards' verified copies as a pipeline's source, the
samples as rayform packed them, and a bad shard refused before any of it is decoded."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import IntegrityError
from rayform.interop.webdataset import VerifiedShards
from rayform.pack.layout import LOWDIM
from rayform.read.reader import PackReader

wds = pytest.importorskip("webdataset")


def _demo(client: rayform.Client) -> tuple[rayform.Slice, rayform.Pack]:
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=2, seconds=3.0, image_size=32)), name="w")
    return s, client.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16)


def test_a_webdataset_pipeline_reads_the_pack_as_rayform_packed_it(tmp_path):
    client = rayform.Client(f"memory://wds-{uuid.uuid4().hex[:8]}", cache=tmp_path / "cache")
    s, pack = _demo(client)
    assert len(pack.shards) > 2
    pipeline = wds.DataPipeline(VerifiedShards(s, fps=15), wds.tarfile_to_samples())
    samples = list(pipeline)
    reader = PackReader(client.store, pack, pack.members)
    packed = reader.raw_many(np.arange(pack.samples))
    assert len(samples) == pack.samples
    for got, (_, raw) in zip(samples, packed):  # pack order, member for member, byte for byte
        assert {k: bytes(v) for k, v in raw.items()} == {k: got[k] for k in pack.members}
    decoded = next(iter(wds.DataPipeline(VerifiedShards(s, pack=pack.key), wds.tarfile_to_samples(),
                                         wds.decode("rgb8"), wds.to_tuple("cam0.rgb.jpg", LOWDIM))))
    assert decoded[0].shape == (32, 32, 3) and decoded[1]["slice"] == s.id  # webdataset decodes .mp itself
    assert all(client.store.cache is not None and client.store.cache.has(sh.sha256) for sh in pack.shards)
    assert client.packs.shard_urls(pack) == [f"{client.store.url}/blobs/{sh.sha256[:2]}/{sh.sha256}"
                                             for sh in pack.shards]


def test_a_corrupt_shard_is_refused_before_webdataset_reads_a_byte_of_it(tmp_path):
    client = rayform.Client(f"memory://wds-{uuid.uuid4().hex[:8]}", cache=tmp_path / "cache")
    s, pack = _demo(client)
    bad = pack.shards[1].sha256
    path = client.store.backend.blob_path(bad)
    data = bytearray(client.store.backend.fs.cat_file(path))
    data[len(data) // 2] ^= 0x01
    client.store.backend.fs.pipe_file(path, bytes(data))
    got = []
    with pytest.raises(IntegrityError, match="shard 1"):
        for sample in wds.DataPipeline(VerifiedShards(s, fps=15), wds.tarfile_to_samples()):
            got.append(sample["__key__"])
    assert len(got) == pack.shards[0].samples  # the first shard's, none of the bad one's
    assert client.store.cache is not None and not client.store.cache.has(bad)
