"""A cache smaller than the slice: two processes stream a pack from S3 through one shared
cache with a limit of a third of the pack. Every sample arrives every epoch, nothing fails,
and a monitor sampling the cache directory sees it within the limit but for the shard each
reader copies from and the one fetched ahead of it, whatever the shuffle window; after the
epochs it is within the limit."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch.multiprocessing as tmp

import rayform
from rayform.cache import eviction
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import InvalidInput
from rayform.read.fetchahead import AHEAD_LIMITED
from tests.conftest import SMALL_DEMO

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(300)]

FPS = 30


def _reader(rank: int, url: str, options: dict, slice_id: str, cache: str, limit: int, out: str, window: int = 4,
            epochs: int = 3) -> None:
    client = rayform.Client(url, storage_options=options, cache=cache, cache_limit=limit)
    ds = rayform.torch.StreamingEpisodeDataset(client.slices.get(slice_id), obs=["cam0/rgb"], action="joints/position",
                                               fps=FPS, horizon=2, split=rayform.torch.Split(rank, 2),
                                               shuffle=rayform.torch.ShuffleConfig(window=window))
    seen = {}
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        seen[epoch] = [f"{x['meta']['segment']}:{int(x['t_ns'])}" for x in ds]
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))


def test_two_processes_stream_three_epochs_through_a_cache_a_third_of_the_slice(s3_endpoint, tmp_path):
    url, options = f"s3://{s3_endpoint.bucket()}/limited", s3_endpoint.storage_options  # a store of its own
    writer = rayform.Client(url, storage_options=options, cache=tmp_path / "writer-cache")
    slice_id = writer.slices.create(ingest_demo(writer, "lab", SMALL_DEMO), name="small").id
    pack = writer.pack(writer.slices.get(slice_id), FPS, workers=1, progress=False, shard_bytes=65_536)
    shard_bytes = [s.bytes for s in pack.shards]
    total = sum(shard_bytes)
    assert len(shard_bytes) >= 10
    limit = total // 3
    cache = tmp_path / "cache"
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], sum(st.st_size for _, st in eviction.blobs(cache)))
            time.sleep(0.002)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    s3_endpoint.reset_counts()
    try:
        tmp.start_processes(_reader, args=(url, options, slice_id, str(cache), limit, str(tmp_path)), nprocs=2,
                            join=True, start_method="spawn")
    finally:
        stop.set()
        watcher.join()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in ("0", "1", "2"):
        both = ranks[0][epoch] + ranks[1][epoch]
        assert len(ranks[0][epoch]) == len(ranks[1][epoch])
        assert len(set(both)) == pack.samples  # every sample, every epoch (padding repeats at most one)
    # each reader pins the shard it copies from and, under a limit, at most one fetched ahead of it
    assert peak[0] <= limit + 2 * (1 + AHEAD_LIMITED) * max(shard_bytes)
    assert peak[0] < total  # the limit bit: the whole pack was never in the cache at once
    gets = [p for m, p in s3_endpoint.requests if m == "GET" and "/blobs/" in p]
    print(f"limit {limit}, peak {peak[0]}, pack {total} in {len(shard_bytes)} shards, {len(gets)} blob GETs")
    assert len(gets) > len(shard_bytes) * 2  # shards were evicted and fetched again in later epochs


class CacheMonitor:
    """Samples the size of a cache directory (its blobs and the copies arriving) every 2 ms."""

    def __init__(self, cache: Path):
        self.cache, self.peak, self._stop = cache, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            files = [p for p in (self.cache / "blobs").rglob("*") if p.is_file()] if self.cache.exists() else []
            size = 0
            for p in files:
                try:
                    size += p.stat().st_size
                except FileNotFoundError:
                    pass
            self.peak = max(self.peak, size)
            time.sleep(0.002)

    def __enter__(self) -> CacheMonitor:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def test_the_limit_holds_under_the_default_shuffle_window(s3_endpoint, tmp_path):
    """A window of 1000 samples spans ~40 shards of this pack: readers hold samples, not those shards."""
    url, options = f"s3://{s3_endpoint.bucket()}/window", s3_endpoint.storage_options
    writer = rayform.Client(url, storage_options=options, cache=tmp_path / "writer-cache")
    demo = DemoConfig(episodes=4, seconds=10.0, seed=3, image_size=32)
    slice_id = writer.slices.create(ingest_demo(writer, "lab", demo), name="window").id
    pack = writer.pack(writer.slices.get(slice_id), FPS, workers=1, progress=False, shard_bytes=65_536)
    shard_bytes = [s.bytes for s in pack.shards]
    total, largest = sum(shard_bytes), max(shard_bytes)
    assert len(shard_bytes) >= 30 and pack.samples > 1000
    limit = total // 3
    cache = tmp_path / "cache"
    with CacheMonitor(cache) as monitor:
        tmp.start_processes(_reader, args=(url, options, slice_id, str(cache), limit, str(tmp_path), 1000, 2),
                            nprocs=2, join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for epoch in ("0", "1"):
        assert len(set(ranks[0][epoch] + ranks[1][epoch])) == pack.samples
    bound = limit + 2 * (1 + AHEAD_LIMITED) * largest
    print(f"limit {limit}, peak {monitor.peak} (bound {bound}), pack {total} in {len(shard_bytes)} shards")
    assert monitor.peak <= bound
    left = sum(p.stat().st_size for p in (cache / "blobs").rglob("*") if p.is_file())
    assert left <= limit  # readers that let go of their shards leave the cache within its limit


def test_a_limit_below_the_largest_shard_is_refused_when_the_dataset_is_made(s3_demo, tmp_path):
    url, options, slice_id = s3_demo
    client = rayform.Client(url, storage_options=options, cache=tmp_path / "cache", cache_limit=20_000)
    s = client.slices.get(slice_id)
    with pytest.raises(InvalidInput, match=rf"cache limit 19.5 KiB is smaller than shard \d+ of {s.id} at 15 fps "
                                           r"\([\d.]+ KiB, its largest\). Raise the limit"):
        rayform.torch.StreamingEpisodeDataset(s, obs=["cam0/rgb"], fps=15)
