"""A reader's epoch, step by step: the raw samples of each step it makes, shards fetched ahead::

    steps ─▶ EpochPlan.positions ─▶ EpochOrder.samples: (part, sample id) of every slot
          ─▶ FetchAhead: the shards of the next blocks of steps come into the cache
          ─▶ PackReader.raw_many: each sample's members as views of its mapped shard

Steps are planned in blocks of about ``BLOCK_SAMPLES`` samples, ``AHEAD_BLOCKS`` blocks
before they are read, so the shards they need are on their way. A shard is unpinned and
unmapped as soon as no planned step needs it, so a reader holds only the shards it is
reading: about one per partition it reads (two where a shuffle window straddles shards),
however long the epoch.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from rayform.read.epoch import EpochOrder
from rayform.read.fetchahead import FetchAhead
from rayform.read.partition import EpochPlan
from rayform.read.reader import PackReader
from rayform.store.fetch import Retry

BLOCK_SAMPLES = 256
AHEAD_BLOCKS = 4

Planned = tuple[Sequence[int], np.ndarray, np.ndarray, np.ndarray, list[list[tuple[int, int]]]]


def read_steps(readers: list[PackReader], order: EpochOrder, plan: EpochPlan, slots: tuple[int, int],
               steps: range, retry: Retry = Retry()) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """``(step, its raw samples)`` for each of ``steps``, reading slots ``[lo, hi)`` of each
    global batch. A raw sample is its members plus ``__key__``, ``__part__`` and ``__shard__``."""
    lo, hi = slots
    width = hi - lo
    per_block = max(1, BLOCK_SAMPLES // max(1, width))
    uses: Counter[tuple[int, int]] = Counter()
    with FetchAhead(readers, retry) as fetch:

        def planned(ks: Sequence[int]) -> Planned:
            parts, ids = order.samples(plan.positions(np.asarray(ks, np.int64), lo, hi))
            shards = np.empty_like(ids)
            for p in np.unique(parts).tolist():
                mine = parts == p
                shards[mine] = readers[p].shard_of(ids[mine])
            pairs = list(zip(parts.tolist(), shards.tolist()))
            needs = [list(dict.fromkeys(pairs[j * width:(j + 1) * width])) for j in range(len(ks))]
            for step_needs in needs:
                uses.update(step_needs)
            fetch.want(dict.fromkeys(key for step_needs in needs for key in step_needs))  # in order of first use
            return ks, parts, ids, shards, needs

        def read(block: Planned) -> Iterator[tuple[int, list[dict[str, Any]]]]:
            ks, parts, ids, shards, needs = block
            for j, k in enumerate(ks):
                for key in needs[j]:
                    fetch.ready(key)
                at = slice(j * width, (j + 1) * width)
                raws: list[dict[str, Any]] = [{}] * width
                for p in np.unique(parts[at]).tolist():
                    mine = np.flatnonzero(parts[at] == p)
                    for i, (key, raw) in zip(mine.tolist(), readers[p].raw_many(ids[at][mine])):
                        raw["__key__"], raw["__part__"], raw["__shard__"] = key, p, int(shards[at][i])
                        raws[i] = raw
                fetch.warmed()  # its samples are read: now the shards after them may share the link
                yield k, raws
                for key in needs[j]:
                    uses[key] -= 1
                    if not uses[key]:
                        del uses[key]
                        readers[key[0]].release(key[1])
                        fetch.done(key)

        ahead: deque[Planned] = deque()
        for start in range(0, len(steps), per_block):
            ahead.append(planned(steps[start:start + per_block]))
            if len(ahead) > AHEAD_BLOCKS:
                yield from read(ahead.popleft())
        while ahead:
            yield from read(ahead.popleft())
