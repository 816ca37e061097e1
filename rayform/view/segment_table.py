"""The segment list ``rayform view`` shows: each segment's latest catalog row, filtered, sorted
and cut into pages on the server, so a store of a million segments opens at once.

The catalog is read once (``Catalog.latest``: a few columns, a million rows in about a
second) and kept while its parts are the same: a page asked more than ``CHECK_S`` seconds
after the last look lists the catalog's refs (one listing) and reads it again only where an
ingest or a compaction changed them. A filtered and sorted listing is kept too, so paging
through it reads nothing again. Filters are the task (a substring, any case), a
duration range, and a query in the language of ``--where`` (``recordings.query``), which
reaches the metadata (``meta.success == false``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform.errors import InvalidInput
from rayform.recordings import health, query
from rayform.recordings.catalog import Catalog

CHECK_S = 2.0  # a catalog looked at this recently is not listed again
PAGE_MAX = 500
SORTS = {"recorded": "recorded", "duration": "duration_s", "name": "name", "task": "task", "id": "id",
         "start": "start_ns", "site": "site", "flags": "flag_count",
         # each health signal's value (a segment without the finding: 0), the worst first when descending
         **{f"health.{kind}": f"health.{kind}" for kind in health.KINDS}}
_COLUMNS = ("id", "version", "bundle", "site", "name", "task", "duration_s", "start_ns", "end_ns", "recorded", "meta",
            "stream_names", "health", "flags")
_KEPT = 8  # filtered listings kept for paging


@dataclass(frozen=True)
class Filter:
    """What the segment list is cut to: a site, a task substring, durations, a query."""

    site: str | None = None
    task: str = ""
    min_duration: float | None = None
    max_duration: float | None = None
    where: str = ""
    sort: str = "recorded"
    descending: bool = False
    flagged: bool = False  # only those a health signal flags

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise InvalidInput(f"sort {self.sort[:40]!r}: one of {', '.join(SORTS)}")
        if len(self.task) > 400 or len(self.where) > 2000:
            raise InvalidInput("a filter of more than 400 (task) or 2000 (query) characters")
        if self.where:
            query.parse(self.where)  # a syntax error is said before anything is read


class SegmentTable:
    """The latest rows of a store's catalog, as pages of a filtered, sorted listing."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._lock = threading.Lock()
        self._table: Any = None
        self._looked_at = 0.0
        self._parts: tuple[str, ...] | None = None
        self._listings: OrderedDict[Filter, tuple[Any, np.ndarray]] = OrderedDict()
        self._population: tuple[Any, dict[int, list[dict[str, Any]]]] | None = None  # (of table, findings)
        self._measuring = threading.Lock()  # held while the population is computed (not ``_lock``: the table's)

    def table(self) -> Any:
        with self._lock:
            if self._table is None or time.monotonic() - self._looked_at > CHECK_S:
                parts = self.catalog.fingerprint()
                self._looked_at = time.monotonic()
                if parts != self._parts or self._table is None:
                    self._table = self.catalog.latest(columns=list(_COLUMNS))
                    self._parts = parts
                    self._listings.clear()
            return self._table

    def sites(self) -> list[dict[str, Any]]:
        """Each site with its count of segments and their hours of recording."""
        table = self.table()
        if table.num_rows == 0:
            return []
        grouped = table.group_by("site").aggregate([("id", "count"), ("duration_s", "sum")])
        rows = sorted(grouped.to_pylist(), key=lambda r: r["site"])
        return [{"site": r["site"], "segments": r["id_count"], "hours": (r["duration_s_sum"] or 0) / 3600}
                for r in rows]

    def page(self, f: Filter, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        """Rows ``offset … offset + limit`` of the listing ``f`` makes, and how many it has."""
        if offset < 0 or not 1 <= limit <= PAGE_MAX:
            raise InvalidInput(f"offset {offset}, limit {limit}: offset 0 or more, limit 1..{PAGE_MAX}")
        import pyarrow as pa

        table, listed = self._listing(f)
        shown = listed[offset:offset + limit]
        rows = [_shown(r) for r in table.take(pa.array(shown)).to_pylist()]
        population = self.population()
        for i, row in zip(shown.tolist(), rows):
            told = population.get(i, ())  # what only the site's others tell (doctor's)
            # a stream most of its site's segments have and it lacks: the doctor's missing_stream
            row["missing"] = sorted(f["stream"] for f in told if f["kind"] == "missing_stream")
            for finding in told:
                row["findings"].append(finding)
                row["flags"] = sorted({*row["flags"], finding["kind"]})
        return {"total": len(listed), "offset": offset, "rows": rows, "signals": list(health.KINDS)}

    def latest(self, segment_id: str) -> tuple[str, str | None] | None:
        """A segment's latest version and the bundle holding it (None: no such segment), from
        the table the list shows (so opening it needs no look-up in the whole catalog)."""
        import pyarrow.compute as pc

        table = self.table()
        found = table.select(["id", "version", "bundle"])
        mine = found.filter(pc.equal(found.column("id"), segment_id)).to_pylist()
        return (mine[0]["version"], mine[0]["bundle"]) if mine else None

    def findings(self, segment_id: str, version: str) -> list[dict[str, Any]]:
        """A version's flagged health findings, from the table the list shows (none for a version
        that is not the latest, or one not measured)."""
        import pyarrow.compute as pc

        table = self.table()
        at = pc.index(table.column("id"), segment_id).as_py()
        if at < 0:
            return []
        mine = table.slice(at, 1).select(["version", "health"]).to_pylist()[0]
        if mine["version"] != version:
            return []
        return findings_of(_parsed(mine["health"])) + self.population().get(at, [])

    def population(self) -> dict[int, list[dict[str, Any]]]:
        """The findings only a site's other episodes tell (``recordings.population``: an episode
        far shorter or longer than its site and task's, a stream the site's episodes have and it
        lacks), by row of the table, each over the whole episode; computed once a table."""
        from rayform.recordings.population import population

        table = self.table()
        with self._measuring:  # concurrent first requests: one computes, the others wait for it
            kept = self._population
            if kept is not None and kept[0] is table:
                return kept[1]
            told = population(table)
            rows = sorted(told)
            spans = table.select(["start_ns", "end_ns"]).take(rows).to_pylist() if rows else []
            found = {row: [{**f, "start_ns": span["start_ns"] or 0, "end_ns": span["end_ns"] or 0} for f in told[row]]
                     for row, span in zip(rows, spans)}
            self._population = (table, found)
        return found

    def _listing(self, f: Filter) -> tuple[Any, np.ndarray]:
        """The table and the rows of it ``f`` lists, in order: an index array (8 bytes a row),
        not a copy of the table, so a few listings kept for paging cost little."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = self.table()
        with self._lock:
            found = self._listings.get(f)
            if found is not None and found[0] is table:
                self._listings.move_to_end(f)
                return found
        keep = np.ones(table.num_rows, bool)
        if f.site:
            keep &= _mask(pc.equal(table.column("site"), f.site))
        if f.task:
            keep &= _mask(pc.match_substring(pc.fill_null(table.column("task"), ""), f.task, ignore_case=True))
        duration = pc.fill_null(table.column("duration_s"), 0.0)
        if f.min_duration is not None:
            keep &= _mask(pc.greater_equal(duration, f.min_duration))
        if f.max_duration is not None:
            keep &= _mask(pc.less_equal(duration, f.max_duration))
        flags = pc.fill_null(pc.list_value_length(table.column("flags")), 0)
        if f.flagged:
            told = np.zeros(table.num_rows, bool)
            told[list(self.population())] = True
            keep &= _mask(pc.greater(flags, 0)) | told
        rows = np.flatnonzero(keep)
        if f.where:  # evaluated over the rows left (a query on metadata parses each row's JSON)
            left = table if len(rows) == table.num_rows else table.take(pa.array(rows))
            rows = rows[query.Query(f.where).mask(left)]
        if f.sort.startswith("health."):  # a signal's values, from the rows' health JSON (parsed once)
            values = query.Columns(table.select(["health"]).take(pa.array(rows))).get(f.sort)
            signal = np.array([v if isinstance(v, (int, float)) else 0.0 for v in values], np.float64)
            rows = rows[np.argsort(-signal if f.descending else signal, kind="stable")]
        elif f.sort != "recorded" or f.descending:
            column = (pa.table({"flag_count": flags}) if f.sort == "flags" else table.select([SORTS[f.sort]])).take(
                pa.array(rows))
            order = pc.sort_indices(column, sort_keys=[(SORTS[f.sort], "descending" if f.descending else "ascending")])
            rows = rows[order.to_numpy()]
        found = (table, rows)
        with self._lock:
            self._listings[f] = found
            while len(self._listings) > _KEPT:
                self._listings.popitem(last=False)
        return found


def _mask(values: Any) -> np.ndarray:
    """An Arrow boolean column as a numpy mask (a null is false)."""
    import pyarrow.compute as pc

    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), bool)


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    meta, doc = _parsed(row.get("meta")), _parsed(row.get("health"))  # each row's JSON parsed once
    return {"id": row["id"], "version": row["version"], "site": row["site"], "name": row["name"],
            "task": row["task"] or "", "duration_s": row["duration_s"], "start_ns": row["start_ns"],
            "recorded": row["recorded"], "streams": list(row["stream_names"] or []),
            "meta": meta if isinstance(meta, dict) else {}, "flags": list(row.get("flags") or []),
            "findings": findings_of(doc), "signals": signals_of(doc)}


def _parsed(column: str | None) -> Any:
    """A catalog row's JSON column (a store's text: what does not parse is nothing)."""
    try:
        return json.loads(column) if column else {}
    except ValueError:
        return {}


def signals_of(doc: Any) -> dict[str, float]:
    """A row's value of each health signal measured (``health.summary``'s ``signals``), from its
    parsed health column."""
    found = doc.get("signals") if isinstance(doc, dict) else None
    return {k: float(v) for k, v in found.items() if isinstance(k, str) and type(v) in (int, float)} \
        if isinstance(found, dict) else {}


def findings_of(doc: Any) -> list[dict[str, Any]]:
    """A row's flagged findings (kind, stream, value, time range), from its parsed health column."""
    return [f for f in health.kept(doc) if health.flagged(f)]
