"""A catalog part read back: untrusted Parquet decoded into a ``pyarrow.Table``, its cost
bounded before decoding (``part_bounds``) and every name in it checked against its grammar
before it is used (as bytes where it can: a million ids in milliseconds)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from rayform import names
from rayform.errors import Malformed
from rayform.recordings.catalog_parts import COLUMNS, OPTIONAL, TYPES
from rayform.recordings.part_bounds import check_declared, decoded_budget, decoded_bytes


def decode(data: bytes, what: str, columns: Sequence[str] | None = None) -> Any:
    """A part's rows as a ``pyarrow.Table`` (of ``columns``), checked: untrusted Parquet is one
    Malformed, and every name in it is checked against its grammar before it is used."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = list(columns) if columns is not None else list(COLUMNS)
    for needed in ("site", "id", "version", "bundle", "recorded"):
        if needed not in wanted:
            wanted.append(needed)
    try:  # sites and bundles repeat: read as dictionaries, their names checked once each
        parquet = pq.ParquetFile(pa.BufferReader(data))
        metadata = parquet.metadata
        present = set(parquet.schema_arrow.names)
        absent = [c for c in wanted if c in OPTIONAL and c not in present]
        wanted = [c for c in wanted if c not in absent]
        check_declared(metadata, len(data), wanted, what)
        # free text read as dictionaries too: what they would take decoded is known before decoding
        table = pq.read_table(pa.BufferReader(data), columns=wanted,
                              read_dictionary=[c for c in wanted if c in _CODED or c in _FREE_TEXT])
    except Malformed:
        raise
    except Exception as e:  # a reader library's failure on untrusted bytes
        raise Malformed(f"{what}: not a catalog part ({type(e).__name__}: {str(e)[:120]})") from None
    decoded = 0
    for name in wanted:
        kind = table.schema.field(name).type
        if name in _FREE_TEXT and pa.types.is_dictionary(kind) and kind.value_type.equals(pa.string()):
            decoded += decoded_bytes(table.column(name))
            if decoded > decoded_budget(len(data)):
                raise Malformed(f"{what}: its text decodes to over {decoded >> 20} MiB from {len(data)} bytes")
            table = table.set_column(table.schema.get_field_index(name), name, table.column(name).cast(pa.string()))
        elif name in _CODED and pa.types.is_dictionary(kind) and kind.value_type.equals(pa.string()):
            table = table.set_column(table.schema.get_field_index(name), name, _checked_codes(
                table.column(name), name, what))
        elif not kind.equals(TYPES[name]):
            raise Malformed(f"{what}: column {name} is {kind}, not {TYPES[name]}")
    _check_names(table, what)
    for name in absent:  # a part from before health signals: not measured
        table = table.append_column(name, pa.nulls(table.num_rows, TYPES[name]))
    return table


_CODED = {"site": (names.SITE, False), "bundle": (names.DIGEST, True)}  # pattern, whether null is allowed
_FREE_TEXT = ("name", "task", "meta", "streams", "health")  # text that may repeat: its decoded size is bounded


def _checked_codes(column: Any, name: str, what: str) -> Any:
    """A dictionary-read column as plain strings, each distinct value checked first."""
    import pyarrow as pa

    pattern, nullable = _CODED[name]
    for chunk in column.chunks:
        if chunk.indices.null_count and not nullable:
            raise Malformed(f"{what}: {name} None is not a rayform name")
        bad = _first_unlike(chunk.dictionary, pattern, nullable)
        if bad is not False:
            noun = "a blob's name" if nullable else "a rayform name"
            raise Malformed(f"{what}: {name} {str(bad)[:80]!r} is not {noun}")
    return column.cast(pa.string())


def _check_names(table: Any, what: str) -> None:
    """Every id and version of a part matches the one form rayform writes (checked as bytes: a
    million in milliseconds; a regular expression names the first bad one)."""
    for column, pattern in (("id", names.SEGMENT_ID), ("version", names.DIGEST)):
        values = table.column(column)
        if all(_fixed_hex(chunk, *_FIXED[column], False) for chunk in values.chunks):
            continue
        bad = _first_unlike(values, pattern, False)
        if bad is not False:
            raise Malformed(f"{what}: {column} {str(bad)[:80]!r} is not a rayform name")


_FIXED = {"id": (b"seg_", 12), "version": (b"", 64)}  # as names.SEGMENT_ID, names.DIGEST
_HEX_PAIRS = np.zeros(1 << 16, bool)  # each two bytes (as one little-endian 16-bit word): both hex digits
_HEX_PAIRS[(np.frombuffer(b"0123456789abcdef", np.uint8)[:, None].astype(np.uint16)
            | (np.frombuffer(b"0123456789abcdef", np.uint8)[None, :].astype(np.uint16) << 8)).ravel()] = True


def fixed_width(chunk: Any, width: int) -> np.ndarray | None:
    """The bytes of an Arrow string array without nulls as ``(len, width)`` uint8, read straight
    from its offsets and data (no Python string made), or None where a string is not ``width``
    bytes long."""
    if not len(chunk):
        return np.zeros((0, width), np.uint8)
    _, offsets_buffer, data_buffer = chunk.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]
    if not np.all(np.diff(offsets) == width):
        return None
    return np.frombuffer(data_buffer, np.uint8)[offsets[0]:offsets[-1]].reshape(-1, width)


def _fixed_hex(chunk: Any, prefix: bytes, digits: int, nullable: bool) -> bool:
    """Whether every string of an Arrow string array is ``prefix`` and ``digits`` lowercase hex
    digits (a null: whether nulls are allowed)."""
    if chunk.null_count:
        if not nullable:
            return False
        chunk = chunk.drop_null()
    data = fixed_width(chunk, len(prefix) + digits)
    if data is None:
        return False
    if not len(data):
        return True
    if len(prefix) and not np.all(data[:, :len(prefix)] == np.frombuffer(prefix, np.uint8)):
        return False
    hexes = np.ascontiguousarray(data[:, len(prefix):]) if len(prefix) else data
    return bool(_HEX_PAIRS[hexes.view("<u2")].all())  # an even count of digits: whole 16-bit words


def _first_unlike(values: Any, pattern: re.Pattern[str], nullable: bool) -> Any:
    """The first of ``values`` (an Arrow string column) not wholly matching ``pattern`` (a null
    where nulls are not allowed); False when every one does."""
    import pyarrow.compute as pc

    matches = pc.match_substring_regex(values, rf"\A(?:{pattern.pattern})\z")
    good = pc.or_kleene(pc.is_null(values), matches) if nullable else pc.fill_null(matches, False)
    if pc.all(good).as_py() is not False:
        return False
    return values[pc.index(good, False).as_py()].as_py()
