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

from rayform.order.epoch import EpochOrder
from rayform.order.partition import EpochPlan
from rayform.read.fetchahead import FetchAhead
from rayform.read.reader import PackReader

BLOCK_SAMPLES = 256
AHEAD_BLOCKS = 4

Planned = tuple[Sequence[int], np.ndarray, np.ndarray, np.ndarray, list[list[tuple[int, int]]]]


def read_steps(readers: list[PackReader], order: EpochOrder, plan: EpochPlan, slots: tuple[int, int],
               steps: range) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """``(step, its raw samples)`` for each of ``steps``, reading slots ``[lo, hi)`` of each
    global batch. A raw sample is its members plus ``__key__``, ``__part__`` and ``__shard__``.

    Under a cache limit a reader holds samples rather than shards: the first time a step needs
    a shard, every sample of it that the planned steps read is copied out (as a shuffle buffer
    holds them) and the shard is let go at once, so what a reader pins in the cache is the shard
    it copies from and the one fetched ahead, whatever the shuffle window. Without a limit the
    shards stay mapped while planned steps need them, and samples are read in place."""
    lo, hi = slots
    width = hi - lo
    per_block = max(1, BLOCK_SAMPLES // max(1, width))
    uses: Counter[tuple[int, int]] = Counter()
    held = _Held() if any(r.store.cache is not None and r.store.cache.limit is not None for r in readers) else None
    with FetchAhead(readers) as fetch:

        def planned(ks: Sequence[int]) -> Planned:
            parts, ids = order.samples(plan.positions(np.asarray(ks, np.int64), lo, hi))
            shards = np.empty_like(ids)
            for p in np.unique(parts).tolist():
                mine = parts == p
                shards[mine] = readers[p].shard_of(ids[mine])
            pairs = list(zip(parts.tolist(), shards.tolist()))
            needs = [list(dict.fromkeys(pairs[j * width:(j + 1) * width])) for j in range(len(ks))]
            if held is not None:
                held.owe(pairs, ids.tolist())
            else:
                for step_needs in needs:
                    uses.update(step_needs)
            fetch.want(dict.fromkeys(key for step_needs in needs for key in step_needs))  # in order of first use
            return ks, parts, ids, shards, needs

        def let_go(key: tuple[int, int]) -> None:
            readers[key[0]].release(key[1])
            fetch.done(key)

        def read(block: Planned) -> Iterator[tuple[int, list[dict[str, Any]]]]:
            ks, parts, ids, shards, needs = block
            for j, k in enumerate(ks):
                at = slice(j * width, (j + 1) * width)
                raws: list[dict[str, Any]] = [{}] * width
                if held is not None:
                    for key in needs[j]:
                        if held.owed(key):
                            fetch.ready(key)
                            held.copy(key, readers[key[0]])
                            let_go(key)
                    for i, (p, sample) in enumerate(zip(parts[at].tolist(), ids[at].tolist())):
                        raws[i] = held.take(p, sample)
                else:
                    for key in needs[j]:
                        fetch.ready(key)
                    for p in np.unique(parts[at]).tolist():
                        mine = np.flatnonzero(parts[at] == p)
                        for i, (key, raw) in zip(mine.tolist(), readers[p].raw_many(ids[at][mine])):
                            raw["__key__"], raw["__part__"], raw["__shard__"] = key, p, int(shards[at][i])
                            raws[i] = raw
                fetch.warmed()  # its samples are read: now the shards after them may share the link
                yield k, raws
                if held is None:
                    for key in needs[j]:
                        uses[key] -= 1
                        if not uses[key]:
                            del uses[key]
                            let_go(key)

        ahead: deque[Planned] = deque()
        for start in range(0, len(steps), per_block):
            ahead.append(planned(steps[start:start + per_block]))
            if len(ahead) > AHEAD_BLOCKS:
                yield from read(ahead.popleft())
        while ahead:
            yield from read(ahead.popleft())


class _Held:
    """Samples copied out of their shards for the planned steps that read them (a shuffle
    buffer's worth under a cache limit), so that the shards need not stay in the cache."""

    def __init__(self) -> None:
        self._owed: dict[tuple[int, int], list[int]] = {}  # (part, shard) -> sample ids planned, not copied
        self._samples: dict[tuple[int, int], list[Any]] = {}  # (part, sample) -> [raw, reads left]

    def owe(self, pairs: list[tuple[int, int]], ids: list[int]) -> None:
        for key, sample in zip(pairs, ids):
            self._owed.setdefault(key, []).append(sample)

    def owed(self, key: tuple[int, int]) -> bool:
        return bool(self._owed.get(key))

    def copy(self, key: tuple[int, int], reader: PackReader) -> None:
        """Copy every sample of shard ``key`` that planned steps read (each once, however often)."""
        wanted = self._owed.pop(key)
        counts = Counter(wanted)
        unique = [s for s in counts if (key[0], s) not in self._samples]
        for s in counts:
            if (key[0], s) in self._samples:
                self._samples[(key[0], s)][1] += counts[s]
        for sample, (name, raw) in zip(unique, reader.raw_many(np.asarray(unique, np.int64))):
            copied: dict[str, Any] = {member: bytes(view) if isinstance(view, memoryview) else view
                                      for member, view in raw.items()}
            copied["__key__"], copied["__part__"], copied["__shard__"] = name, key[0], key[1]
            self._samples[(key[0], sample)] = [copied, counts[sample]]

    def take(self, part: int, sample: int) -> dict[str, Any]:
        entry = self._samples[(part, sample)]
        entry[1] -= 1
        if not entry[1]:
            del self._samples[(part, sample)]
        raw: dict[str, Any] = entry[0]
        return raw
