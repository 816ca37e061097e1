"""PackReader: samples by offset out of mapped shards, pinned in a cache while mapped."""

from __future__ import annotations

import io
import os

import pytest

from rayform.read.reader import PackReader


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    import rayform
    from rayform.converters.demo import DemoConfig, ingest_demo

    client = rayform.Client(tmp_path_factory.mktemp("reader") / "store")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=2, seconds=3.0, seed=5, image_size=64)), name="r")
    pack = client.pack(s, 10, workers=1, progress=False, shard_bytes=70_000)
    assert len(pack.shards) >= 3
    reader = PackReader(client.store, pack, pack.members)
    shards = [client.store.local_blob(sh.sha256).read_bytes() for sh in pack.shards]
    return pack, reader, shards


def _first_rows(pack):
    out, n = [], 0
    for sh in pack.shards:
        out.append(n)
        n += sh.samples
    return out


def _plain(samples):
    return [(key, {m: bytes(v) for m, v in members.items()}) for key, members in samples]


def test_the_index_agrees_with_webdataset_reading_the_same_tar(packed):
    """The index and the tar layout say the same thing: any webdataset pipeline reads a pack."""
    import webdataset as wds

    pack, reader, shards = packed
    first = _first_rows(pack)
    for n, sh in enumerate(pack.shards):
        src = wds.tariterators.tar_file_expander([{"url": f"shard{n}", "stream": io.BytesIO(shards[n])}])
        by_tar = [{m: s[m] for m in pack.members} for s in wds.tariterators.group_by_keys(src, lcase=False)]
        by_index = [m for _, m in _plain(reader.raw_many(range(first[n], first[n] + sh.samples)))]
        assert by_index == by_tar


def test_a_mapped_shard_of_a_cache_is_pinned_until_released(tmp_path):
    """Eviction never deletes a shard a reader has mapped; once released, it may."""
    import rayform
    from rayform.converters.demo import DemoConfig, ingest_demo
    from rayform.store import eviction

    client = rayform.Client("memory://pinned", cache=tmp_path / "cache")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=2.0, image_size=32)), name="p")
    pack = client.pack(s, 10, workers=1, progress=False)
    store = client.store
    assert store.cache is not None
    reader = PackReader(store, pack, pack.members)
    ids = range(0, pack.shards[0].samples)
    before = _plain(reader.raw_many(ids))
    path = store.cache.blob_path(pack.shards[0].sha256)
    assert eviction.evict(path) is None and path.exists()
    reader.release(0)
    assert eviction.evict(path) == pack.shards[0].bytes and not path.exists()
    assert _plain(reader.raw_many(ids)) == before  # fetched again on the next read


def _mapped_kib(root: str) -> int:
    """Resident KiB of this process's mappings of files under ``root`` (from /proc/self/smaps)."""
    total, current = 0, ""
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                current = parts[5] if len(parts) > 5 else ""
            elif line.startswith("Rss:") and current.startswith(root):
                total += int(parts[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
@pytest.mark.parametrize("budget", [0, 256 << 10])
def test_random_reads_keep_the_mapped_pages_within_the_budget(tmp_path, monkeypatch, budget):
    import numpy as np

    import rayform
    import rayform.read.reader as reader
    from rayform.converters.demo import DemoConfig, ingest_demo

    c = rayform.Client(tmp_path / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=3, seconds=4.0, image_size=160)))
    pack = c.pack(s, 30, workers=1, progress=False, shard_bytes=1 << 18)  # small shards: small page-cache folios
    total_kib = sum(x.bytes for x in pack.shards) // 1024
    monkeypatch.setattr(reader, "RESIDENT_BYTES", budget)
    ds = rayform.torch.EpisodeDataset(s, obs=["cam0/rgb", "wrist/rgb"], fps=30)
    peak = 0
    for batch in np.array_split(np.random.default_rng(0).permutation(len(ds)), len(ds) // 2):
        ds.__getitems__(batch.tolist())
        peak = max(peak, _mapped_kib(c.store.root))
    if budget:  # a budget below what one read may map: each batch's pages go before the next is read
        assert peak < 0.25 * total_kib, (peak, total_kib)
    else:  # unbounded: the whole pack ends up mapped
        assert peak > 0.8 * total_kib, (peak, total_kib)
