"""PackReader: samples by offset out of cached shards, or cut from a shard as it arrives."""

from __future__ import annotations

import io

import pytest

from rayform.errors import IntegrityError
from rayform.read.reader import PackReader


class Arriving:
    """A shard read front to back in small reads, as ShardStream hands it over."""

    def __init__(self, data: bytes, what: str = "shard 0", most: int = 7_000):
        self._f, self.what, self.pos, self.most = io.BytesIO(data), what, 0, most
        self.reads = 0

    def read(self, n: int = -1) -> bytes:
        parts = []
        while n != 0:
            part = self._f.read(self.most if n < 0 else min(n, self.most))
            if not part:
                break
            parts.append(part)
            n -= len(part) if n > 0 else 0
        self.reads += 1
        data = b"".join(parts)
        self.pos += len(data)
        return data


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


def test_a_shard_cut_as_it_arrives_gives_what_the_cached_copy_gives(packed):
    pack, reader, shards = packed
    first = _first_rows(pack)
    for n, sh in enumerate(pack.shards):
        ids = range(first[n], first[n] + sh.samples)
        assert _plain(reader.stream_many(Arriving(shards[n]), ids)) == _plain(reader.raw_many(ids))


def test_a_run_from_mid_shard_reads_past_the_samples_before_it(packed):
    pack, reader, shards = packed
    base = _first_rows(pack)[1]
    ids = range(base + 3, base + pack.shards[1].samples - 2)
    shard = Arriving(shards[1])
    got = _plain(reader.stream_many(shard, ids))
    assert [k for k, _ in got] == [f"{pack.slice_id}#{i}" for i in ids]
    assert got == _plain(reader.raw_many(ids))
    assert 0 < shard.pos < len(shards[1])  # what follows the run is left for the caller to verify


def test_the_cut_agrees_with_webdataset_reading_the_same_tar(packed):
    """The index and the tar layout say the same thing: any webdataset pipeline reads a pack."""
    import webdataset as wds

    pack, reader, shards = packed
    first = _first_rows(pack)
    for n, sh in enumerate(pack.shards):
        src = wds.tariterators.tar_file_expander([{"url": f"shard{n}", "stream": io.BytesIO(shards[n])}])
        by_tar = [{m: s[m] for m in pack.members} for s in wds.tariterators.group_by_keys(src, lcase=False)]
        by_index = [m for _, m in _plain(reader.stream_many(Arriving(shards[n]), range(first[n], first[n] + sh.samples)))]
        assert by_index == by_tar


def test_a_shard_shorter_than_its_index_says_is_one_error_naming_it(packed):
    pack, reader, shards = packed
    ids = range(0, pack.shards[0].samples)
    with pytest.raises(IntegrityError, match=rf"{pack.slice_id}: shard 0 ended at byte \d+, but sample \d+ lies at"):
        list(reader.stream_many(Arriving(shards[0][: len(shards[0]) // 2]), ids))
