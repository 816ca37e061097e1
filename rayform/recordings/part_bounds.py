"""What reading a catalog part may cost, bounded by the part's own size before anything is
decoded (``part_decode.decode`` asks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rayform.errors import Malformed

# A part is untrusted and Parquet compresses a constant column to nothing: 300 KB can declare
# five million rows (1.5 GB decoded). An honest part holds a distinct version a row (at least
# 32 bytes of digest that no codec shrinks), so a row costs bytes; its pages and its text
# decode to at most these multiples of the part's size.
ROWS_PER_BYTE = 1
PAGES_PER_BYTE = 100
DECODED_BYTES, DECODED_PER_BYTE = 64 << 20, 100


def check_declared(metadata: Any, size: int, wanted: Sequence[str], what: str) -> None:
    """What a part's footer declares, bounded by its size before anything is decoded."""
    if metadata.num_rows > ROWS_PER_BYTE * size:
        raise Malformed(f"{what}: declares {metadata.num_rows} rows in {size} bytes")
    pages = 0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            if column.path_in_schema.split(".")[0] in wanted:
                pages += max(0, int(column.total_uncompressed_size))
    if pages > PAGES_PER_BYTE * size + (1 << 20):
        raise Malformed(f"{what}: declares {pages >> 20} MiB of pages in {size} bytes")


def decoded_bytes(column: Any) -> int:
    """The bytes a dictionary-read text column takes once decoded (its values' lengths, a row
    each), from its indices and its dictionary's lengths: nothing decoded."""
    import pyarrow.compute as pc

    total = 0
    for chunk in column.chunks:
        lengths = pc.binary_length(chunk.dictionary).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        indices = chunk.indices.drop_null().to_numpy(zero_copy_only=False).astype(np.int64)
        total += int(lengths[indices].sum())
    return total


def decoded_budget(size: int) -> int:
    """The most a part of ``size`` bytes may decode its text to."""
    return DECODED_BYTES + DECODED_PER_BYTE * size
