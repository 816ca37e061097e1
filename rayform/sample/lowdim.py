"""The array entries of a batch's low-dimensional records, checked and read as columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rayform.codec import records
from rayform.errors import Malformed

_SEEN_LIMIT = 64  # (stream, field) pairs remembered: a pack's records hold a handful


class RecordArrays:
    """Array entries (``records.pack_array``) of one pack's records, each checked to hold the
    shape the pack's schema says, read as ``(n, *shape)`` columns of ``n`` records.

    Every record of a pack describes an array alike: once one entry has been checked in full
    (per stream and field), entries with the very same dtype string, shape list and byte count
    are checked with a few comparisons and their bytes read as one array (a record's cost is
    what a loader pays beside the image decode); any other entry is checked in full."""

    def __init__(self) -> None:
        # (stream, field) -> (dtype string, shape list, dtype, bytes) of an entry checked in full
        self._seen: dict[tuple[str, str], tuple[str, list[int], np.dtype, int]] = {}

    def column(self, entries: Sequence[Any], shape: tuple[int, ...], whats: Sequence[str], stream: str,
               field: str) -> np.ndarray:
        """``(len(entries), *shape)``: ``stream``'s ``field`` (``stream`` empty: the record's own)
        of each record, ``whats[i]`` naming record ``i`` in an error."""
        seen = self._seen.get((stream, field))
        if seen is not None:
            dtype_str, shape_list, dtype, nbytes = seen
            data = []
            for entry in entries:
                if type(entry) is not dict:
                    break
                d = entry.get("data")
                if type(d) is not bytes or len(d) != nbytes or entry.get("dtype") != dtype_str \
                        or entry.get("shape") != shape_list:
                    break
                data.append(d)
            else:
                return np.frombuffer(b"".join(data), dtype).reshape(len(entries), *shape)
        return np.stack([self.array(e, shape, what, stream, field) for e, what in zip(entries, whats)])

    def array(self, entry: Any, shape: tuple[int, ...], what: str, stream: str, field: str) -> np.ndarray:
        """One entry checked in full (and remembered, for :meth:`column`'s comparisons)."""
        values = records.unpack_array(entry, what)
        if values.shape != shape:
            name = {"future": stream, "pad": f"{stream} pad mask", "past": f"{stream} history",
                    "history_pad": "history pad mask"}[field]
            raise Malformed(f"{what}: {name} is {values.shape}, the pack says {shape}")
        if len(self._seen) < _SEEN_LIMIT:
            self._seen.setdefault((stream, field), (entry["dtype"], list(entry["shape"]), values.dtype, values.nbytes))
        return values
