"""A site's catalog, as stored: parts (Parquet tables of segment versions) and the refs that
make them visible. Decoding one, checked, is ``part_decode``'s; reading them as one table is
``catalog``'s.

Every ingest (``segments.add_many``, ``rayform ingest``) appends one part per site: a blob
holding a row for each segment version it stored, and a ref naming it::

    refs/catalog/<site>/<stamp>-<random>.json   {"format", "part": <blob>, "rows", "replaces", "created"}

Nothing is rewritten, so appenders never conflict, on a local disk or on S3: each writes a
key of its own (the time to the microsecond and 8 random hex), and a reader lists the
site's parts (one listing) and reads them in key order. ``compact`` writes one part replacing all a site has
(its key takes the newest replaced one's time, so a part appended meanwhile still sorts
after it) and only then removes the replaced refs: a reader that lists in between sees both
and skips what the new part replaces (``replaces``), and an appender racing the compaction
keeps its part. A part is a blob like any other: content-addressed, verified on read.

A row: the segment's ``id``, ``name``, ``site``, ``version``, the ``bundle`` that holds its
manifest and small arrays (None: its manifest is a loose blob), when the version was
``recorded`` (ns; a segment's latest version is the one recorded last, so a push of an old
version never makes it the latest), ``start_ns`` and ``end_ns``
(its earliest and latest timestamp), ``duration_s``, ``task``, ``meta`` (JSON),
``streams`` (JSON: each stream's kind, count, rate, shape, dtype, encoding) and
``stream_names``. A Parquet file opens in any tool (pandas, DuckDB, Polars).
"""

from __future__ import annotations

import datetime
import functools
import io
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.errors import Malformed, NotFound, StoreError
from rayform.recordings.streams import median_period, task_of
from rayform.untrusted import array_list, integer, mapping, string

PART_FORMAT = "rayform.catalog-part/1"
PREFIX = "refs/catalog"
# a part's key; a compaction's: its newest part's (without its own c…), then c<4 hex>
_KEY = re.compile(r"(\d{8}T\d{6}\d{6}Z)-([0-9a-f]{8})(?:c[0-9a-f]{4})?")
COLUMNS = ("site", "id", "name", "version", "bundle", "recorded", "start_ns", "end_ns", "duration_s", "task", "meta",
           "streams", "stream_names", "health", "flags")
LISTINGS = 20  # listings of the parts tried while compactions replace what each listed
OPTIONAL = ("health", "flags")  # parts written before health signals lack them: read as null (not measured)


@dataclass(frozen=True)
class CatalogRow:
    """What a stored segment version adds to its site's catalog."""

    id: str
    name: str
    site: str
    version: str
    bundle: str | None
    recorded: int  # when the version was recorded at its origin (ns since the epoch; push keeps it)
    start_ns: int
    end_ns: int
    task: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)
    streams: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    health: Mapping[str, Any] | None = None  # recordings.health.summary; None: not measured


class PartRef(NamedTuple):
    """A part of a site's catalog, as its ref names it."""

    site: str
    key: str  # <stamp>-<random>: the ref's file name, which orders the parts
    part: str  # the Parquet blob
    rows: int
    replaces: tuple[str, ...]  # keys of the parts it stands for (compaction)


def new_key(stamp: str | None = None) -> str:
    """A part's key: the time now (or ``stamp``) to the microsecond, and 8 random hex."""
    if stamp is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{os.urandom(4).hex()}"


def ref_key(site: str, key: str) -> str:
    return f"{PREFIX}/{names.site(site, trusted=True)}/{key}.json"


def encode(rows: Sequence[CatalogRow]) -> bytes:
    """The Parquet bytes of a part."""
    return encode_table(table_of(rows))


def encode_table(table: Any) -> bytes:
    """The Parquet bytes of a part's table (``table_of``, or parts' tables concatenated)."""
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(table.select(list(COLUMNS)), out, compression="zstd", row_group_size=1 << 17)
    return out.getvalue()


def table_of(rows: Sequence[CatalogRow]) -> Any:
    """Rows as a ``pyarrow.Table`` of the part's columns."""
    import pyarrow as pa

    return pa.table({
        "site": pa.array([r.site for r in rows], pa.string()),
        "id": pa.array([r.id for r in rows], pa.string()),
        "name": pa.array([r.name for r in rows], pa.string()),
        "version": pa.array([r.version for r in rows], pa.string()),
        "bundle": pa.array([r.bundle for r in rows], pa.string()),
        "recorded": pa.array([r.recorded for r in rows], pa.int64()),
        "start_ns": pa.array([r.start_ns for r in rows], pa.int64()),
        "end_ns": pa.array([r.end_ns for r in rows], pa.int64()),
        "duration_s": pa.array([(r.end_ns - r.start_ns) / 1e9 for r in rows], pa.float64()),
        "task": pa.array([r.task for r in rows], pa.string()),
        "meta": pa.array([json.dumps(dict(r.meta), sort_keys=True, separators=(",", ":")) for r in rows], pa.string()),
        "streams": pa.array([json.dumps(dict(r.streams), sort_keys=True, separators=(",", ":")) for r in rows],
                            pa.string()),
        "stream_names": pa.array([sorted(r.streams) for r in rows], pa.list_(pa.string())),
        "health": pa.array([None if r.health is None else json.dumps(
            {"signals": r.health["signals"], "findings": r.health["findings"]}, sort_keys=True, separators=(",", ":"))
            for r in rows], pa.string()),
        "flags": pa.array([None if r.health is None else list(r.health["flags"]) for r in rows], pa.list_(pa.string())),
    })


def unique_versions(table: Any) -> Any:
    """``table`` with one row per segment version, in its order: of rows naming one (id,
    version), the one recorded last, the first of those where they tie. Compactions that ran at
    once over overlapping runs of parts each keep the rows they share; whichever later merges
    them keeps the same row, whatever the parts' order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows < 2:
        return table
    at = pa.array(np.arange(table.num_rows, dtype=np.int64))
    keyed = pa.table({"id": table.column("id"), "version": table.column("version"),
                      "recorded": table.column("recorded"), "at": at})
    order = pc.sort_indices(keyed, sort_keys=[("id", "ascending"), ("version", "ascending"),
                                              ("recorded", "descending"), ("at", "ascending")])
    ids, versions = pc.take(keyed.column("id"), order), pc.take(keyed.column("version"), order)
    starts = np.ones(table.num_rows, bool)  # where a (id, version) begins in that order: its winner
    starts[1:] = ~(pc.equal(ids[1:], ids[:-1]).to_numpy(zero_copy_only=False)
                   & pc.equal(versions[1:], versions[:-1]).to_numpy(zero_copy_only=False))
    if starts.all():
        return table
    keep = np.sort(pc.take(at, order).to_numpy()[starts])
    return table.take(pa.array(keep))


def _parse_ref(doc: Any, site: str, key: str, what: str) -> PartRef:
    mapping(doc, what)
    if doc.get("format") != PART_FORMAT:
        raise Malformed(f"{what}: format {str(doc.get('format'))[:40]!r}, not {PART_FORMAT}")
    replaces = tuple(string({"k": k}, "k", what) for k in array_list(doc, "replaces", what))
    if any(not _KEY.fullmatch(k) for k in replaces):
        raise Malformed(f"{what}: replaces a part that is not a part's key")
    return PartRef(site, key, names.digest(doc.get("part"), f"{what}: part"), integer(doc, "rows", what, 0, 1 << 40),
                   replaces)


class CatalogParts:
    """The parts of a store's catalogs: listed, written, compacted."""

    def __init__(self, store: CachedStore):
        self.store = store

    def live(self, site: str | None = None) -> list[PartRef]:
        """The parts a reader reads, in order: every part listed (of one site or all), but those
        another listed part replaces. One listing, and one read per part ref."""
        found = self.listed(site)
        replaced = {(p.site, k) for p in found for k in p.replaces}
        return [p for p in found if (p.site, p.key) not in replaced]

    def listed(self, site: str | None = None) -> list[PartRef]:
        """Every part a ref names (of one site or all), replaced ones too, by site and key.

        A part listed but gone when read was replaced by a compaction since the listing, and
        what replaces it may have come after the listing (it is written before the parts it
        replaces are removed): the listing is taken again, so a walk never passes over rows."""
        prefix = PREFIX if site is None else f"{PREFIX}/{names.site(site, trusted=True)}"
        for _ in range(LISTINGS):
            found, whole = self._read_listing(prefix)
            if whole:
                return sorted(found, key=lambda p: (p.site, p.key))
        raise StoreError(f"{self.store.display}: the catalog's parts changed under {LISTINGS} listings in a row "
                         "(compactions running without pause); try again")

    def _read_listing(self, prefix: str) -> tuple[list[PartRef], bool]:
        """The parts of one listing, and whether every ref it listed was still there."""
        found: list[PartRef] = []
        for key in self.store.list_refs(prefix):
            parts = key.split("/")
            if len(parts) != 4 or not names.SITE.fullmatch(parts[2]) or not _KEY.fullmatch(parts[3].removesuffix(".json")):
                continue
            what = f"ref {key} in {self.store.display}"
            parse = functools.partial(_parse_ref, site=parts[2], key=parts[3].removesuffix(".json"), what=what)
            try:
                found.append(self.store.get_ref(key, parse=parse))
            except NotFound:
                if not self.store.has_ref(key):
                    return found, False
                found.append(self.store.get_ref(key, parse=parse))  # there after all: read again
        return found, True

    def append(self, rows: Iterable[CatalogRow]) -> list[PartRef]:
        """One new part per site of ``rows`` (in their order); written, then made visible."""
        by_site: dict[str, list[CatalogRow]] = {}
        for row in rows:
            by_site.setdefault(row.site, []).append(row)
        return [self._write(site, mine, new_key(), ()) for site, mine in sorted(by_site.items())]

    def _write(self, site: str, rows: Sequence[CatalogRow] | bytes, key: str, replaces: tuple[str, ...],
               count: int | None = None) -> PartRef:
        data = rows if isinstance(rows, bytes) else encode(rows)
        digest = self.store.put_blob(data)
        n = count if count is not None else len(rows)
        created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
        self.store.put_ref(ref_key(site, key), {"format": PART_FORMAT, "part": digest, "rows": n,
                                                "replaces": list(replaces), "created": created})
        # the ref reaches it from now on; a gc that decided before may have deleted it meanwhile
        self.store.confirm_committed({digest: data}, f"catalog part {key}")
        return PartRef(site, key, digest, n, replaces)

    def compact(self, site: str, merged: bytes, rows: int, replaced: Sequence[PartRef],
                legacy: Sequence[str] = ()) -> PartRef:
        """Write ``merged`` (the Parquet of every row of ``replaced``, a consecutive run of the
        site's parts, and of the ``legacy`` segment refs folded in) as one part standing for
        them, then remove what it replaces. Its key takes the newest replaced part's time and
        sorts right after it, so it takes their place among the parts."""
        newest = max((p.key for p in replaced), default=None)
        key = f"{newest[:31]}c{os.urandom(2).hex()}" if newest else new_key()
        part = self._write(site, merged, key, tuple(p.key for p in replaced), rows)
        for p in replaced:
            self.store.delete_ref(ref_key(site, p.key))
        for key in legacy:
            self.store.delete_ref(key)
        return part


def catalog_row(segment_id: str, name: str, site: str, version: str, bundle: str | None, recorded: int,
                meta: Mapping[str, Any], streams: Mapping[str, tuple[Any, np.ndarray]]) -> CatalogRow:
    """A version's row, from its streams (name -> (stream entry, timestamps)): its time span,
    its task, each stream's summary (its health, where measured, is added by the writer)."""
    return CatalogRow(segment_id, name, site, version, bundle, recorded, min(int(ts[0]) for _, ts in streams.values()),
                      max(int(ts[-1]) for _, ts in streams.values()), task_of(meta), meta,
                      {n: stream_summary(info, ts) for n, (info, ts) in streams.items()})


def stream_summary(info: Any, timestamps: np.ndarray) -> dict[str, Any]:
    """What a row says of one stream: kind, count, rate (Hz, from the median period), shape,
    dtype, encoding."""
    period = median_period(timestamps)
    return {"kind": info.kind, "count": info.count, "rate_hz": round(1e9 / period, 6) if period > 0 else None,
            "shape": list(info.shape), "dtype": info.dtype, "encoding": info.encoding}




def _types() -> dict[str, Any]:
    import pyarrow as pa

    text, whole = pa.string(), pa.int64()
    return {"site": text, "id": text, "name": text, "version": text, "bundle": text, "recorded": whole,
            "start_ns": whole, "end_ns": whole, "duration_s": pa.float64(), "task": text, "meta": text,
            "streams": text, "stream_names": pa.list_(text), "health": text, "flags": pa.list_(text)}


class _LazyTypes(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        self.update(_types())
        return dict.__getitem__(self, key)


TYPES = _LazyTypes()  # each column's pyarrow type, made on first use (``import rayform`` imports no pyarrow)
