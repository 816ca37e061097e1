"""Streaming stages: generators ``stage(src, ...) -> Iterator`` composed with webdataset's
shuffle stage into the streaming dataset's pipeline::

    runs ─▶ run_samples ─▶ wds shuffle(rng seeded by seed, epoch, rank, worker) ─▶ skip ─▶ build

    run_samples, per run: a verified local copy ─▶ samples by offset (PackReader.raw_many), or
                          the shard arriving from the store (ShardStream, teed into the cache)
                          ─▶ samples cut by offset as it arrives (PackReader.stream_many)

Both give the same raw samples (the same keys, the same member views), so one builder makes
every sample. The pack's index says where every member is, so no tar header is parsed: the
tar layout is for every other reader (``webdataset.WebDataset`` reads a pack's shards as
they are, and a test checks both agree).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from rayform.pack.manifest import Pack
from rayform.read.partition import Run
from rayform.read.reader import PackReader
from rayform.store.cached import CachedStore
from rayform.store.fetch import Retry, ShardStream


def opened_ahead(runs: list[Run], pack: Pack, store: CachedStore, reader: PackReader, retry: Retry = Retry()
                 ) -> Iterator[tuple[int, Run, ShardStream | None]]:
    """Each run with its shard's stream, or None where a verified local copy is read by
    offset. The next run's stream is opened while this run is read, so its shard's first
    bytes are on their way (a request's first byte is the slowest) before they are needed."""
    def open_for(run: Run) -> ShardStream | None:
        info = pack.shards[run.shard]
        if store.local_copy(info.sha256) is not None:
            return None
        return store.stream(info.sha256, info.bytes, reader.what(f"shard {run.shard}", info.sha256), retry,
                            reader.shard_chunks(run.shard), pack.chunk_bytes, reader.pull)

    pending: ShardStream | None = None
    try:
        for n, run in enumerate(runs):
            stream, pending = (pending if pending is not None else open_for(run)), None
            later = runs[n + 1] if n + 1 < len(runs) else None
            if later is not None and pack.shards[later.shard].sha256 != pack.shards[run.shard].sha256:
                pending = open_for(later)  # the same shard twice in a row: the second read is from the cache
            yield n, run, stream
    finally:
        if pending is not None:
            pending.abort()


def run_samples(runs: list[Run], pack: Pack, store: CachedStore, reader: PackReader, retry: Retry = Retry()
                ) -> Iterator[dict[str, Any]]:
    """Each run's raw samples, in order, by offset: from a verified local copy, else cut from
    its shard as it streams from the store into the cache (verified at the shard's end)."""
    first_row = np.concatenate([[0], np.cumsum([s.samples for s in pack.shards])])
    for n, run, stream in opened_ahead(runs, pack, store, reader, retry):
        url = f"{pack.shards[run.shard].sha256}#{n}"
        base = int(first_row[run.shard])
        ids = range(base + run.first, base + run.stop)
        if stream is not None and not stream.verified_chunks:
            stream.finish()  # a pack without chunk digests: the whole shard is verified first
            stream = None
        samples: Iterable[tuple[str, dict[str, Any]]]
        if stream is None:
            samples = reader.raw_many(ids)
        else:
            samples = reader.stream_many(stream, ids)
        try:
            for key, raw in samples:
                raw["__key__"], raw["__url__"] = key, url
                yield raw
        except BaseException:  # stopped early or failed: a partial shard is never kept
            if stream is not None:
                stream.abort()
            raise
        if stream is not None:
            stream.finish()


def skip(samples: Iterable[Any], n: int) -> Iterator[Any]:
    """Drop the first ``n`` items (resumption: what was already yielded before an interruption)."""
    for i, sample in enumerate(samples):
        if i >= n:
            yield sample
