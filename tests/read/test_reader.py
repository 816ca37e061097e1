"""PackReader: samples by offset out of mapped shards, pinned in a cache while mapped."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
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
    from rayform.cache import eviction
    from rayform.converters.demo import DemoConfig, ingest_demo

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
    from rayform.converters.demo import DemoConfig, ingest_demo

    c = rayform.Client(tmp_path / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=3, seconds=4.0, image_size=160)))
    pack = c.pack(s, 30, workers=1, progress=False, shard_bytes=1 << 18)  # small shards: small page-cache folios
    total_kib = sum(x.bytes for x in pack.shards) // 1024
    monkeypatch.setenv("RAYFORM_READER_RESIDENT", str(budget))
    ds = rayform.torch.EpisodeDataset(s, obs=["cam0/rgb", "wrist/rgb"], fps=30)
    peak = 0
    for batch in np.array_split(np.random.default_rng(0).permutation(len(ds)), len(ds) // 2):
        ds.__getitems__(batch.tolist())
        peak = max(peak, _mapped_kib(c.store.root))
    if budget:  # a budget below what one read may map: each batch's pages go before the next is read
        assert peak < 0.25 * total_kib, (peak, total_kib)
    else:  # unbounded: the whole pack ends up mapped
        assert peak > 0.8 * total_kib, (peak, total_kib)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc/self/status")
def test_pages_are_dropped_when_the_mapped_pages_reach_the_budget_not_before(tmp_path, monkeypatch):
    """The drop is decided on what the process holds mapped (RssFile), not on the reads'
    upper bound (a 2 MiB folio a read): with a budget several batches' pages wide, the pages
    are dropped every few batches, each drop re-faulting what is read next, and stay within
    the budget and one batch's reads."""
    import numpy as np

    import rayform
    import rayform.read.reader as reader
    from rayform.converters.demo import DemoConfig, ingest_demo

    c = rayform.Client(tmp_path / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=3, seconds=4.0, image_size=160)))
    c.pack(s, 30, workers=1, progress=False, shard_bytes=1 << 18)
    budget = 2 << 20
    monkeypatch.setenv("RAYFORM_READER_RESIDENT", str(budget))
    drops = []
    monkeypatch.setattr(reader.PackReader, "drop_pages",
                        lambda self, drop=reader.PackReader.drop_pages: (drops.append(1), drop(self))[1])
    ds = rayform.torch.EpisodeDataset(s, obs=["cam0/rgb", "wrist/rgb"], fps=30)
    batches = np.array_split(np.random.default_rng(0).permutation(len(ds)), len(ds) // 4)
    peak = 0
    for batch in batches:
        ds.__getitems__(batch.tolist())
        peak = max(peak, _mapped_kib(c.store.root))
    assert 1 <= len(drops) < len(batches) / 3, (len(drops), len(batches))  # the upper bound dropped every batch
    assert peak < (budget >> 10) + 4 * 1024, peak


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """A local store whose pack has shards of many 16 KiB chunks; nothing remembered as verified."""
    import rayform
    from rayform.cache import marks as files
    from rayform.converters.demo import DemoConfig, ingest_demo

    c = rayform.Client(tmp_path / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=2, seconds=3.0, image_size=64)))
    with monkeypatch.context() as m:
        m.setattr("rayform.packer.tar_writer.CHUNK_BYTES", 16 << 10)
        pack = c.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 18)
    files._VERIFIED.clear()
    import shutil

    shutil.rmtree(files._marker("x").parent, ignore_errors=True)
    return c, s, pack


def _reference(c, pack, ids):
    from rayform.cache import marks as files

    reader = PackReader(c.store, pack, pack.members)  # whole shards hashed first
    out = [{k: bytes(v) for k, v in raw.items()} for _, raw in reader.raw_many(ids)]
    files._VERIFIED.clear()
    import shutil

    shutil.rmtree(files._marker("x").parent, ignore_errors=True)
    return out


def test_a_random_reader_of_a_local_store_hashes_the_chunks_it_reads_not_whole_shards(chunked, monkeypatch):
    from rayform.cache import marks as files

    c, s, pack = chunked
    ids = [3, pack.samples // 2, pack.samples - 1]
    reference = _reference(c, pack, ids)
    shards = {str(c.store.backend.blob_path(x.sha256)) for x in pack.shards}
    real = files.hash_file

    def no_shard(path):
        assert str(path) not in shards, f"shard {path} hashed whole"
        return real(path)  # the index (small) is hashed whole, once

    with monkeypatch.context() as m:
        m.setattr(files, "hash_file", no_shard)
        reader = PackReader(c.store, pack, pack.members, whole_shards=False)
        got = [{k: bytes(v) for k, v in raw.items()} for _, raw in reader.raw_many(ids)]
    assert got == reference
    assert any(0 < check.left < len(check.done) for check in reader._chunked.values())  # only what was read
    reader.raw_many(np.arange(pack.samples))  # every chunk of every shard now: remembered whole
    assert not reader._chunked
    files._VERIFIED.clear()  # a new process
    again = PackReader(c.store, pack, pack.members, whole_shards=False)
    again.raw_many(ids)
    assert not again._chunked  # nothing left to check chunk by chunk


def test_a_flipped_byte_fails_the_read_of_its_chunk_and_no_other(chunked):
    from rayform.errors import IntegrityError

    c, s, pack = chunked
    reader = PackReader(c.store, pack, pack.members, whole_shards=False)
    rows = reader.rows(np.arange(pack.samples))
    victim = int(np.flatnonzero(rows[:, 0] == 0)[-1])  # the last sample of shard 0
    start, end = int(rows[victim, 1]), int(rows[victim, 2])
    path = c.store.backend.blob_path(pack.shards[0].sha256)
    data = bytearray(Path(path).read_bytes())
    data[end - 600] ^= 0x10
    with open(path, "r+b") as f:
        f.write(data)
    chunk = (end - 600) // pack.chunk_bytes
    clean = [i for i in np.flatnonzero(rows[:, 0] == 0) if int(rows[i, 2] - 1) // pack.chunk_bytes < chunk
             and int(rows[i, 2]) <= chunk * pack.chunk_bytes]
    assert clean
    reader.raw_many(clean)  # samples in good chunks of that shard still read
    with pytest.raises(IntegrityError, match=f"shard 0 .*chunk {chunk} does not match"):
        reader.raw_many([victim])
    assert start < end
