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
from rayform.errors import Malformed
from rayform.recordings.catalog_parts import COLUMNS, CatalogParts, CatalogRow, PartRef, decode
from rayform.untrusted import array_list, mapping, string

LEGACY = "refs/segments"
_TABLES_KEPT = 1 << 30  # bytes of decoded parts a process keeps
_TABLES: OrderedDict[str, Any] = OrderedDict()  # part digest -> pyarrow.Table (every column)
_LOCK = threading.Lock()


class Location(NamedTuple):
    """Where a segment version is: its site, and the bundle holding its manifest (None: loose)."""

    site: str
    bundle: str | None


def part_table(store: CachedStore, part: PartRef) -> Any:
    """A part's rows (every column), read and checked once per process (parts are immutable)."""
    with _LOCK:
        found = _TABLES.get(part.part)
        if found is not None:
            _TABLES.move_to_end(part.part)
            return found
    what = f"catalog part {part.key} of site {part.site} in {store.display}"
    table = decode(store.get_blob(part.part, what), what)
    if table.num_rows != part.rows:
        raise Malformed(f"{what}: {table.num_rows} rows, its ref says {part.rows}")
    sites = set(table.column("site").unique().to_pylist())
    if sites - {part.site}:
        raise Malformed(f"{what}: rows of site {sorted(sites - {part.site})[0]!r}, not of {part.site!r}")
    with _LOCK:
        _TABLES[part.part] = table
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


class Catalog:
    """A store's segment versions as one table (``pyarrow.Table``, the columns of
    ``catalog_parts.COLUMNS``). Read once per call of ``table``/``latest``; ``locate`` keeps
    an index and reads again only for a version it does not know."""

    def __init__(self, store: CachedStore):
        self.store = store
        self.parts = CatalogParts(store)
        self._index: tuple[np.ndarray, np.ndarray, list[Location]] | None = None

    # -- the table -----------------------------------------------------------------------
    def legacy_refs(self, site: str | None = None) -> list[tuple[str, str, str, list[str]]]:
        """``(id, site, name, versions)`` of every per-segment ref (a store written before catalogs)."""
        prefix = LEGACY if site is None else f"{LEGACY}/{names.site(site, trusted=True)}"
        out = []
        for key in self.store.list_refs(prefix):
            parts = key.split("/")
            if len(parts) == 4 and names.SEGMENT_ID.fullmatch(parts[3].removesuffix(".json")):
                what = f"ref {key} in {self.store.display}"
                out.append(self.store.get_ref(key, parse=functools.partial(_legacy_ref, key=key, what=what)))
        return out

    def table(self, site: str | None = None, columns: Sequence[str] | None = None) -> Any:
        """Every row, legacy refs' first (their columns beyond id, name, site, version, bundle and
        recorded are null: their manifests are not read), then each live part's, site by site."""
        import pyarrow as pa

        wanted = list(dict.fromkeys([*(columns or COLUMNS), "site", "id", "version", "bundle", "recorded"]))
        tables = []
        legacy = self.legacy_refs(site)
        if legacy:
            rows = [(s, sid, name, v, i) for sid, s, name, versions in legacy for i, v in enumerate(versions)]
            cols = {"site": [r[0] for r in rows], "id": [r[1] for r in rows], "name": [r[2] for r in rows],
                    "version": [r[3] for r in rows], "bundle": [None] * len(rows), "recorded": [r[4] for r in rows]}
            tables.append(pa.table({c: pa.array(cols.get(c, [None] * len(rows)), _TYPES[c]) for c in wanted}))
        for part in self.parts.live(site):
            tables.append(part_table(self.store, part).select(wanted))
        if not tables:
            return pa.table({c: pa.array([], _TYPES[c]) for c in wanted})
        return pa.concat_tables(tables)

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
            if self._index is None or attempt:
                self._index = self._build_index()
            keys, ids, locations = self._index
            key = np.frombuffer(bytes.fromhex(version), "S32")[0]
            i = int(np.searchsorted(keys, key))
            while i < len(keys) and keys[i] == key:
                if ids[i] == segment_id.encode():
                    return locations[i]
                i += 1
        return None

    def bundles_of(self, versions: Sequence[str]) -> list[str | None]:
        """The bundle each version is in (the first row listing it; None: loose, or unlisted)."""
        if self._index is None:
            self._index = self._build_index()
        keys, _, locations = self._index
        if not len(versions):
            return []
        wanted = np.frombuffer(bytes.fromhex("".join(versions)), "S32")
        at = np.searchsorted(keys, wanted)
        found = (at < len(keys)) & (keys[np.minimum(at, len(keys) - 1)] == wanted) if len(keys) else np.zeros(len(wanted), bool)
        return [locations[i].bundle if ok else None for i, ok in zip(at.tolist(), found.tolist())]

    def _build_index(self) -> tuple[np.ndarray, np.ndarray, list[Location]]:
        table = self.table(columns=["site", "id", "version", "bundle"])
        versions = table.column("version").to_numpy(zero_copy_only=False)
        keys = np.frombuffer(bytes.fromhex("".join(versions.tolist())), "S32") if len(versions) else np.zeros(0, "S32")
        ids = np.array(table.column("id").to_pylist(), "S16")
        locations = [Location(s, b) for s, b in zip(table.column("site").to_pylist(), table.column("bundle").to_pylist())]
        order = np.argsort(keys, kind="stable")
        return keys[order], ids[order], [locations[i] for i in order.tolist()]


def _row(row: dict[str, Any], what: str) -> CatalogRow:
    """A row of a part as a CatalogRow (its JSON columns parsed, as untrusted)."""
    from rayform.untrusted import json_document

    meta = json_document(row["meta"].encode(), f"{what}: meta of {row['id']}")
    streams = json_document(row["streams"].encode(), f"{what}: streams of {row['id']}")
    return CatalogRow(row["id"], row["name"], row["site"], row["version"], row["bundle"], row["recorded"],
                      row["start_ns"], row["end_ns"], row["task"] or "", meta, streams)


def latest_rows(table: Any) -> Any:
    """The last row of each segment id by (recorded, position)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0 or pc.count_distinct(table.column("id")).as_py() == table.num_rows:
        return table  # each segment once (the usual case): nothing to choose
    ids = np.array(table.column("id").to_pylist(), "S16")
    order = np.lexsort((np.arange(table.num_rows), table.column("recorded").to_numpy(), ids))
    last = np.ones(len(order), bool)
    last[:-1] = ids[order][1:] != ids[order][:-1]
    keep = np.sort(order[last])  # in the table's order
    return table.take(pa.array(keep))


def _types() -> dict[str, Any]:
    import pyarrow as pa

    text, whole = pa.string(), pa.int64()
    return {"site": text, "id": text, "name": text, "version": text, "bundle": text, "recorded": whole,
            "start_ns": whole, "end_ns": whole, "duration_s": pa.float64(), "task": text, "meta": text,
            "streams": text, "stream_names": pa.list_(text)}


class _LazyTypes(dict[str, Any]):
    def __missing__(self, key: str) -> Any:
        self.update(_types())
        return dict.__getitem__(self, key)


_TYPES = _LazyTypes()  # pyarrow's types, made on first use (``import rayform`` imports no pyarrow)


_CATALOGS: dict[tuple[str, str], Catalog] = {}


def catalog_of(store: CachedStore) -> Catalog:
    """The process's one ``Catalog`` of a store (its index of where versions lie is built once)."""
    key = (store.id, store.cache_root)
    found = _CATALOGS.get(key)
    if found is None:
        found = _CATALOGS[key] = Catalog(store)
    return found
