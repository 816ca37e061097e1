"""Every segment version a store holds, as one table: its sites' live catalog parts
(``catalog_parts``), after the per-segment refs a store written before catalogs has
(``refs/segments/<site>/<id>.json``, read as rows too: they stay readable, and
``Catalog.compact`` folds them into a part).

Listing, ``show``, ``slices.create`` and the pack planner read this, not one object per
episode: a site of a million segments is one listing, a few part refs and a few Parquet
blobs (each read once per process: parts are immutable, cached by digest).

A segment's versions are its rows in the order they were recorded (``recorded``, then the
parts' order); its latest version is the last. ``locate`` says where a version's manifest
lies (a bundle, or a loose blob), from an index of sorted digests built once per catalog.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.errors import Malformed, RayformError
from rayform.recordings import query
from rayform.recordings.catalog_parts import COLUMNS, PREFIX, TYPES, CatalogParts, CatalogRow, PartRef
from rayform.recordings.part_decode import decode, fixed_width
from rayform.untrusted import array_list, mapping, string

LEGACY = "refs/segments"
_TABLES_KEPT = 256 << 20  # bytes of decoded parts a process keeps
_TABLES: OrderedDict[tuple[str, tuple[str, ...]], Any] = OrderedDict()  # (part digest, columns) -> pyarrow.Table
_CHECKED = ("site", "id", "version", "bundle", "recorded")  # read with any columns: their names are checked
_LOCK = threading.Lock()


class Location(NamedTuple):
    """Where a segment version is: its site, and the bundle holding its manifest (None: loose)."""

    site: str
    bundle: str | None


def part_table(store: CachedStore, part: PartRef, columns: Sequence[str] | None = None) -> Any:
    """A part's rows (of ``columns``: Parquet reads only those), read and checked once per
    process (parts are immutable)."""
    wanted = tuple(dict.fromkeys([*(columns or COLUMNS), *_CHECKED]))
    key = (part.part, wanted)
    with _LOCK:
        found = _TABLES.get(key)
        if found is None:  # a table of more columns serves as well
            found = next((t.select(list(wanted)) for (d, cols), t in _TABLES.items()
                          if d == part.part and set(wanted) <= set(cols)), None)
        if found is not None:
            return found
    what = f"catalog part {part.key} of site {part.site} in {store.display}"
    table = decode(store.get_blob(part.part, what), what, wanted)
    if table.num_rows != part.rows:
        raise Malformed(f"{what}: {table.num_rows} rows, its ref says {part.rows}")
    sites = set(table.column("site").unique().to_pylist())
    if sites - {part.site}:
        raise Malformed(f"{what}: rows of site {sorted(sites - {part.site})[0]!r}, not of {part.site!r}")
    with _LOCK:
        _TABLES[key] = table
        while sum(t.nbytes for t in _TABLES.values()) > _TABLES_KEPT and len(_TABLES) > 1:
            _TABLES.popitem(last=False)
    return table


def _legacy_ref(doc: Any, key: str, what: str) -> tuple[str, str, str, list[str]]:
    """A segment ref as stores before catalogs wrote them: id, site, name, versions (checked)."""
    mapping(doc, what)
    sid = names.segment_id(doc.get("id"), f"{what}: id")
    site = names.site(doc.get("site"), f"{what}: site", trusted=False)
    if key != f"{LEGACY}/{site}/{sid}.json":
        raise Malformed(f"{what}: names the segment {sid} at {site}, which does not live there")
    versions = [names.digest(v, f"{what}: version") for v in array_list(doc, "versions", what)]
    if not versions:
        raise Malformed(f"{what}: no versions")
    return sid, site, string(doc, "name", what), versions


PLACES = ("id", "version", "bundle")  # where a row's version is: what a walk of the store reads


class PartBlob(NamedTuple):
    """A catalog part's blob, what it is, and why it cannot be read (None: not known to fail)."""

    digest: str
    what: str
    error: str | None = None


def _part_what(part: PartRef) -> str:
    return f"catalog part {part.key} of site {part.site}"


class Catalog:
    """A store's segment versions as one table (``pyarrow.Table``, the columns of
    ``catalog_parts.COLUMNS``). Read once per call of ``table``/``latest``; ``locate`` keeps
    an index and reads again only for a version it does not know."""

    def __init__(self, store: CachedStore):
        self.store = store
        self.parts = CatalogParts(store)
        self._index: _Index | None = None

    # -- the table -----------------------------------------------------------------------
    def legacy_refs(self, site: str | None = None,
                    unreadable: list[PartBlob] | None = None) -> list[tuple[str, str, str, list[str]]]:
        """``(id, site, name, versions)`` of every per-segment ref (a store written before catalogs);
        ``unreadable``: a ref that cannot be read is added there (no blob: ``-``) and left out."""
        prefix = LEGACY if site is None else f"{LEGACY}/{names.site(site, trusted=True)}"
        out = []
        for key in self.store.list_refs(prefix):
            parts = key.split("/")
            if len(parts) == 4 and names.SEGMENT_ID.fullmatch(parts[3].removesuffix(".json")):
                what = f"ref {key} in {self.store.display}"
                try:
                    out.append(self.store.get_ref(key, parse=functools.partial(_legacy_ref, key=key, what=what)))
                except RayformError as e:
                    if unreadable is None:
                        raise
                    unreadable.append(PartBlob("-", f"per-segment ref {key}", f"unreadable: {e}"))
        return out

    def table(self, site: str | None = None, columns: Sequence[str] | None = None,
              unreadable: list[PartBlob] | None = None) -> Any:
        """Every row, legacy refs' first (their columns beyond id, name, site, version, bundle and
        recorded are null: their manifests are not read), then each live part's, site by site.
        ``unreadable``: a part that cannot be read is added there and left out (else it raises)."""
        import pyarrow as pa

        wanted = list(dict.fromkeys([*(columns or COLUMNS), *_CHECKED]))
        tables = []
        legacy = self.legacy_refs(site, unreadable)
        if legacy:
            rows = [(s, sid, name, v, i) for sid, s, name, versions in legacy for i, v in enumerate(versions)]
            cols = {"site": [r[0] for r in rows], "id": [r[1] for r in rows], "name": [r[2] for r in rows],
                    "version": [r[3] for r in rows], "bundle": [None] * len(rows), "recorded": [r[4] for r in rows]}
            tables.append(pa.table({c: pa.array(cols.get(c, [None] * len(rows)), TYPES[c]) for c in wanted}))
        for part in self.parts.live(site):
            try:
                tables.append(part_table(self.store, part, wanted).select(wanted))
            except RayformError as e:
                if unreadable is None:
                    raise
                unreadable.append(PartBlob(part.part, _part_what(part), f"unreadable: {e}"))
        if not tables:
            return pa.table({c: pa.array([], TYPES[c]) for c in wanted})
        return pa.concat_tables(tables)

    def select(self, where: str | query.Query | None = None, site: str | None = None,
               columns: Sequence[str] = ()) -> Any:
        """The latest row of every segment (of ``site``; every site: None) that ``where`` selects,
        with ``columns`` and those a query reads: the one way the house asks its catalog "which
        segments" (slices, ``segments ls``, the view)."""
        q = query.Query(where) if isinstance(where, str) else where
        table = self.latest(site, columns=list(dict.fromkeys([*columns, *(query.COLUMNS_READ if q else ())])))
        return q.select(table) if q is not None else table

    def fingerprint(self) -> tuple[str, ...]:
        """What changes whenever the catalog does (a part appended or compacted, a per-segment
        ref written): the keys of its refs, one listing each, nothing decoded. A reader keeping
        a table compares it to know when to read again (``rayform view``)."""
        return (*self.store.list_refs(PREFIX), *self.store.list_refs(LEGACY))

    def part_blobs(self) -> list[PartBlob]:
        """The blobs the catalog itself holds: every part its listings name (live, or compacted
        away and not yet deleted), from the listings."""
        return [PartBlob(p.part, _part_what(p)) for p in self.parts.listed()]

    def part_rows(self, site: str) -> list[int]:
        """The rows of each of ``site``'s live parts, from the listing (nothing decoded)."""
        return [p.rows for p in self.parts.live(site)]

    def places(self, strict: bool = True) -> tuple[list[tuple[str, str, str | None]], list[PartBlob]]:
        """Each row's ``(id, version, bundle)`` once, in the table's order (a version two rows place
        apart, as a hostile part may, is there twice), and the parts that could not be read:
        ``strict`` raises at the first; else they are returned, their rows reaching nothing, and
        the rest is read (a walk that is not strict names each and goes on)."""
        unreadable: list[PartBlob] | None = None if strict else []
        table = self.table(columns=list(PLACES), unreadable=unreadable)
        return list(dict.fromkeys(zip(*(table.column(c).to_pylist() for c in PLACES)))), unreadable or []

    def sites(self) -> list[str]:
        """Every site with a catalog part or a per-segment ref, from the listings (nothing decoded)."""
        return sorted({p.site for p in self.parts.live()} | {r[1] for r in self.legacy_refs()})

    def latest(self, site: str | None = None, columns: Sequence[str] | None = None) -> Any:
        """One row per segment: its latest version's (recorded last; of rows recorded at once, the
        later one)."""
        return latest_rows(self.table(site, columns))

    def versions(self, segment_id: str) -> list[str]:
        """A segment's versions, oldest first (none: an empty list)."""
        import pyarrow.compute as pc

        table = self.table(columns=["id", "version", "recorded"])
        mine = table.filter(pc.equal(table.column("id"), segment_id))
        order = np.lexsort((np.arange(mine.num_rows), mine.column("recorded").to_numpy()))
        return list(dict.fromkeys(mine.column("version").to_numpy(zero_copy_only=False)[order].tolist()))

    def stream_counts(self, versions: np.ndarray) -> tuple[dict[str, int], np.ndarray]:
        """For segment versions (their 32 bytes, a ``V32`` array): how many of those the
        catalog lists have each stream, and which it does not list (a mask; their streams
        are in their manifests). One read of two columns, however many versions."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self.table(columns=["version", "stream_names"])
        table = table.filter(pc.is_valid(table.column("stream_names")))  # a legacy ref's row says none
        keys = version_bytes(table.column("version"))
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        at = np.minimum(np.searchsorted(ordered, versions), max(0, len(keys) - 1))
        listed = (ordered[at] == versions) if len(keys) else np.zeros(len(versions), bool)
        names = table.column("stream_names").take(pa.array(order[at][listed]))
        counts = pc.value_counts(pc.list_flatten(names)).to_pylist() if len(names) else []
        return {c["values"]: c["counts"] for c in counts}, ~listed

    def rows(self, versions: Sequence[tuple[str, str]]) -> list[CatalogRow | None]:
        """The row of each ``(segment id, version)`` (its first, where several list it), or None
        for one no part lists (a per-segment ref's, whose manifest says the rest)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self.table()
        keys = pc.binary_join_element_wise(table.column("id"), table.column("version"), "@")
        wanted = pa.array([f"{i}@{v}" for i, v in versions], pa.string())
        at = pc.index_in(wanted, value_set=keys).to_pylist()
        found = table.take(pa.array([i for i in at if i is not None], pa.int64())).to_pylist()
        rows = iter(found)
        out: list[CatalogRow | None] = []
        for i in at:
            row = next(rows) if i is not None else None
            out.append(None if row is None or row["start_ns"] is None else _row(row, f"catalog of {self.store.display}"))
        return out

    # -- where a version is ---------------------------------------------------------------
    def locate(self, segment_id: str, version: str) -> Location | None:
        """Where ``segment_id@version`` is (its site, its bundle), or None if no ref lists it."""
        for attempt in range(2):
            found = self._indexed(fresh=bool(attempt)).find(segment_id, version)
            if found is not None:
                return found
        return None

    def bundles_of(self, versions: Any) -> tuple[list[str], np.ndarray]:
        """Where each of ``versions`` (64-hex strings, or their 32 bytes as a ``V32`` array) is:
        the bundles, and each version's place in that list (-1: loose, or unlisted)."""
        return self._indexed().bundles_of(versions)

    def _indexed(self, fresh: bool = False) -> _Index:
        """The index of where versions lie: built on first use, and again when ``fresh``."""
        if self._index is None or fresh:
            self._index = _Index.of(self.table(columns=["site", "id", "version", "bundle"]))
        return self._index


class _Index:
    """Versions sorted by their bytes, for ``locate``: a version's first row's site and bundle
    (the first: the same selection makes the same slice whatever was ingested since)."""

    def __init__(self, keys: np.ndarray, ids: np.ndarray, site: np.ndarray, sites: list[str], bundle: np.ndarray,
                 bundles: list[str]):
        self.keys, self.ids, self.site, self.sites, self.bundle, self.bundles = keys, ids, site, sites, bundle, bundles

    @classmethod
    def of(cls, table: Any) -> _Index:
        import pyarrow.compute as pc

        keys = version_bytes(table.column("version"))
        ids = np.array(table.column("id").to_pylist(), "S16")
        site_codes = pc.dictionary_encode(table.column("site")).combine_chunks()
        bundle_codes = pc.dictionary_encode(table.column("bundle")).combine_chunks()
        site = site_codes.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        bundle = bundle_codes.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
        order = np.argsort(keys, kind="stable")
        return cls(keys[order], ids[order], site[order], site_codes.dictionary.to_pylist(), bundle[order],
                   bundle_codes.dictionary.to_pylist())

    def find(self, segment_id: str, version: str) -> Location | None:
        key = np.frombuffer(bytes.fromhex(version), "V32")[0]
        i = int(np.searchsorted(self.keys, key))
        while i < len(self.keys) and self.keys[i] == key:
            if self.ids[i] == segment_id.encode():
                b = int(self.bundle[i])
                return Location(self.sites[int(self.site[i])], self.bundles[b] if b >= 0 else None)
            i += 1
        return None

    def bundles_of(self, versions: Any) -> tuple[list[str], np.ndarray]:
        wanted = versions if isinstance(versions, np.ndarray) else hex_bytes(list(versions), 32)
        if not len(wanted) or not len(self.keys):
            return self.bundles, np.full(len(wanted), -1, np.int32)
        at = np.minimum(np.searchsorted(self.keys, wanted), len(self.keys) - 1)
        return self.bundles, np.where(self.keys[at] == wanted, self.bundle[at], -1).astype(np.int32)


def version_bytes(versions: Any) -> np.ndarray:
    """An Arrow column of versions (64 lowercase hex, as catalog parts are checked to hold) as
    their 32 bytes (``V32``), read from its buffers: no Python string made."""
    out = []
    for chunk in versions.chunks:
        digits = fixed_width(chunk, 64) if not chunk.null_count else None
        if digits is None:
            raise Malformed("a catalog's versions are not all 64 hex digits")
        nibbles = _NIBBLE[digits]
        out.append(np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2]).view("V32").ravel())
    return np.concatenate(out) if out else np.zeros(0, "V32")


def hex_bytes(values: list[str], size: int) -> np.ndarray:
    """Hex strings of ``size`` bytes each, as a ``V<size>`` array (one join, one decode)."""
    if not values:
        return np.zeros(0, f"V{size}")
    return np.frombuffer(bytes.fromhex("".join(values)), f"V{size}")


def _row(row: dict[str, Any], what: str) -> CatalogRow:
    """A row of a part as a CatalogRow (its JSON columns parsed, as untrusted)."""
    from rayform.untrusted import json_document

    meta = json_document(row["meta"].encode(), f"{what}: meta of {row['id']}")
    streams = json_document(row["streams"].encode(), f"{what}: streams of {row['id']}")
    health = None  # not measured; else kept as it was (a push carries it)
    if row.get("health") is not None:
        doc = json_document(row["health"].encode(), f"{what}: health of {row['id']}")
        health = {"signals": doc.get("signals", {}), "findings": doc.get("findings", []),
                  "flags": [str(f) for f in row.get("flags") or []]}
    return CatalogRow(row["id"], row["name"], row["site"], row["version"], row["bundle"], row["recorded"],
                      row["start_ns"], row["end_ns"], row["task"] or "", meta, streams, health)


def latest_rows(table: Any) -> Any:
    """The last row of each segment id by (recorded, position), in the table's order."""
    import pyarrow as pa

    mask = latest_mask(table)
    return table if mask is None else table.filter(pa.array(mask))


def latest_mask(table: Any) -> np.ndarray | None:
    """Which rows of a catalog table are their segment's latest (None: every row, each segment
    listed once, the usual case)."""
    if table.num_rows == 0:
        return None
    ids = id_numbers(table.column("id"))
    by_id = np.sort(ids)
    if not np.any(by_id[1:] == by_id[:-1]):
        return None
    order = np.lexsort((np.arange(table.num_rows), table.column("recorded").to_numpy(), ids))
    last = np.ones(len(order), bool)
    last[:-1] = ids[order][1:] != ids[order][:-1]
    mask = np.zeros(table.num_rows, bool)
    mask[order[last]] = True
    return mask


_DIGIT = np.zeros(256, np.uint64)
_DIGIT[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16, dtype=np.uint64)
_NIBBLE = _DIGIT.astype(np.uint8)


def id_numbers(ids: Any) -> np.ndarray:
    """Segment ids (an Arrow string column of ``seg_`` and 12 hex digits, as catalog parts are
    checked to hold) as the 48-bit numbers their digits spell: one to one, and sorted in
    milliseconds where a million strings take a second."""
    out = []
    for chunk in ids.chunks:
        data = None if chunk.null_count else fixed_width(chunk, 16)
        if data is None:
            raise Malformed("a catalog's segment ids are not all seg_ and 12 hex digits")
        digits = data[:, 4:]
        number = np.zeros(len(chunk), np.uint64)
        for column in range(12):
            number = (number << np.uint64(4)) | _DIGIT[digits[:, column]]
        out.append(number)
    return np.concatenate(out) if out else np.zeros(0, np.uint64)


_CATALOGS: dict[tuple[str, str], Catalog] = {}


def catalog_of(store: CachedStore) -> Catalog:
    """The process's one ``Catalog`` of a store (its index of where versions lie is built once)."""
    key = (store.id, store.cache_root)
    found = _CATALOGS.get(key)
    if found is None:
        found = _CATALOGS[key] = Catalog(store)
    return found
