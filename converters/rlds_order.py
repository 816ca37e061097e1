"""The order TFDS reads a split's episodes in, so rayform's episode numbers are TFDS's.

``tfds.builder_from_directory(d).as_dataset(split, shuffle_files=False)`` reads a split's shards
through ``tf.data.Dataset.interleave`` with ``ReadConfig``'s defaults (TFDS's core/reader.py
and core/utils/read_config.py): ``interleave_block_length``
16 and ``interleave_cycle_length`` 16, or 1 (shard after shard) when the dataset was prepared with
``disable_shuffling`` (``dataset_info.json``: ``disableShuffling``). Deterministic interleave opens
up to ``cycle`` shards in slots, takes ``block`` records from a slot before moving to the next,
and refills a slot with the next shard when it comes round to it empty: an exhausted shard is
found when its slot is next visited, which then moves on. ``array_record`` shards are read by
TFDS as a data source, whose index runs shard after shard: cycle 1 as well.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence

import numpy as np

BLOCK = 16  # ReadConfig.interleave_block_length
CYCLE = 16  # reader._get_default_interleave_cycle_length, shuffling allowed


def runs(lengths: Sequence[int], cycle: int = CYCLE, block: int = BLOCK) -> Iterator[tuple[int, int, int]]:
    """``(shard, first record, count)`` runs in the order tf.data's interleave yields records."""
    slots: list[list[int] | None] = [None] * max(1, cycle)
    upcoming, open_, i = 0, 0, 0
    while upcoming < len(lengths) or open_:
        slot = slots[i]
        if slot is None:
            if upcoming < len(lengths):
                slots[i] = [upcoming, 0]
                upcoming += 1
                open_ += 1
            else:
                i = (i + 1) % len(slots)
            continue
        shard, record = slot
        left = lengths[shard] - record
        if left <= 0:  # found exhausted on this visit: the slot empties, the cycle moves on
            slots[i] = None
            open_ -= 1
            i = (i + 1) % len(slots)
            continue
        take = min(block, left)
        yield shard, record, take
        slot[1] += take
        if take == block:  # a whole block: the next slot's turn (a short one ends the shard here)
            i = (i + 1) % len(slots)


@functools.lru_cache(maxsize=4)  # a process's tasks ask for their split's numbers again and again
def episode_numbers(lengths: tuple[int, ...], sequential: bool = False) -> list[np.ndarray]:
    """Per shard, each record's place in the split as TFDS reads it (``sequential``: shard after
    shard, as for ``disableShuffling`` or ``array_record`` shards)."""
    out = [np.empty(n, np.int64) for n in lengths]
    place = 0
    for shard, first, count in runs(lengths, 1 if sequential else CYCLE, BLOCK):
        out[shard][first:first + count] = np.arange(place, place + count)
        place += count
    return out
