"""A cache smaller than the slice: two processes stream a pack from S3 through one shared
cache with a limit of a third of the pack, for three epochs. Every sample arrives every
epoch, nothing fails, and the cache stays within the limit but for the shards the readers
are reading at that moment."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch.multiprocessing as tmp

import rayform
from rayform.converters.demo import ingest_demo
from rayform.read.fetchahead import AHEAD_LIMITED
from rayform.store import eviction
from tests.conftest import SMALL_DEMO

pytestmark = [pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(300)]

FPS = 30


def _reader(rank: int, url: str, options: dict, slice_id: str, cache: str, limit: int, out: str) -> None:
    client = rayform.Client(url, storage_options=options, cache=cache, cache_limit=limit)
    ds = rayform.torch.StreamingEpisodeDataset(client.slices.get(slice_id), obs=["cam0/rgb"], action="joints/position",
                                               fps=FPS, horizon=2, split=rayform.torch.Split(rank, 2),
                                               shuffle=rayform.torch.ShuffleConfig(window=4))
    seen = {}
    for epoch in range(3):
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
    # each reader holds the shard of the one partition it reads (two where a window straddles
    # them) and, under a limit, at most one fetched ahead of it
    assert peak[0] <= limit + 2 * (2 + AHEAD_LIMITED) * max(shard_bytes)
    assert peak[0] < total  # the limit bit: the whole pack was never in the cache at once
    gets = [p for m, p in s3_endpoint.requests if m == "GET" and "/blobs/" in p]
    print(f"limit {limit}, peak {peak[0]}, pack {total} in {len(shard_bytes)} shards, {len(gets)} blob GETs")
    assert len(gets) > len(shard_bytes) * 2  # shards were evicted and fetched again in later epochs
