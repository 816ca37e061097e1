"""Streaming stages: generators ``stage(src, ...) -> Iterator`` composed with webdataset's own
tar iteration, grouping and shuffle stages into the streaming dataset's pipeline::

    runs ─▶ run_samples ─▶ wds shuffle(rng seeded by seed, epoch, rank, worker) ─▶ skip ─▶ build

    run_samples, per run: a verified local copy ─▶ samples by offset (PackReader), or
                          shard_sources ─▶ wds tar_file_expander ─▶ wds group_by_keys ─▶ select_runs
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from rayform.pack.manifest import Pack
from rayform.partition import Run
from rayform.reader import PackReader
from rayform.shardstream import Retry, local_copy, open_shard
from rayform.store import Store


def reader_rng(seed: int, epoch: int, rank: int, worker: int) -> random.Random:
    """The shuffle buffer's RNG: from (seed, epoch, rank, worker) only, never pid or time."""
    state = np.random.SeedSequence([seed & (2**63 - 1), epoch, rank, worker, 0x5B]).generate_state(2, np.uint64)
    return random.Random(int(state[0]) << 64 | int(state[1]))


def shard_sources(runs: list[Run], pack: Pack, store: Store, retry: Retry = Retry()) -> Iterator[dict[str, Any]]:
    """Open each run's shard as a stream; verify (and cache) each one once it has been read."""
    for n, run in enumerate(runs):
        info = pack.shards[run.shard]
        stream = open_shard(store, info.sha256, info.bytes, f"shard {run.shard}", pack.slice_id, pack.fps, retry)
        try:
            yield {"url": f"{info.sha256}#{n}", "stream": stream, "run": run}
        except GeneratorExit:  # the reader stopped early: a partial shard is never kept
            stream.abort()
            raise
        stream.finish()


def run_samples(runs: list[Run], pack: Pack, store: Store, reader: PackReader, retry: Retry = Retry()
                ) -> Iterator[dict[str, Any]]:
    """Each run's raw samples, in order: from a verified local copy by offset (the index
    says where every member is, so no tar is parsed), else streamed from the store through
    webdataset's tar iteration and grouping, into the cache."""
    import webdataset as wds

    first_row = np.concatenate([[0], np.cumsum([s.samples for s in pack.shards])])
    for n, run in enumerate(runs):
        digest = pack.shards[run.shard].sha256
        if local_copy(store, digest) is not None:
            base = int(first_row[run.shard])
            for key, raw in reader.raw_many(range(base + run.first, base + run.stop)):
                raw["__key__"], raw["__url__"] = key, f"{digest}#{n}"
                yield raw
            continue
        src = shard_sources([run], pack, store, retry)
        src = wds.tariterators.tar_file_expander(src)
        src = wds.tariterators.group_by_keys(src, lcase=False)
        yield from select_runs(src, [run])


def select_runs(samples: Iterable[dict[str, Any]], runs: list[Run]) -> Iterator[dict[str, Any]]:
    """Keep the samples of each run's ``[first, stop)``; the rest of its shard only passes through."""
    current, ordinal = None, 0
    for sample in samples:
        url = sample["__url__"]
        if url != current:
            current, ordinal = url, 0
            run = runs[int(url.rsplit("#", 1)[1])]
        if run.first <= ordinal < run.stop:
            yield sample
        ordinal += 1


def skip(samples: Iterable[Any], n: int) -> Iterator[Any]:
    """Drop the first ``n`` items (resumption: what was already yielded before an interruption)."""
    for i, sample in enumerate(samples):
        if i >= n:
            yield sample
