"""``rayform doctor``: the episodes a health signal flags, from the catalog.

Signals are measured at ingest (``recordings.health``) and kept in each row of the catalog, so
a million episodes report in one scan. A row from before signals were measured has none: its
segment is read and measured here (``measure``). Two signals need the population (``recordings.population``) and are
computed over the rows asked about, per site and task: ``duration`` (a robust z of the
episode's length against its site-and-task's: median and MAD) and ``missing_stream`` (a stream
that at least 90% of its site's episodes have and it lacks).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayform.cache.store_view import StoreRef
from rayform.errors import InvalidInput
from rayform.recordings import health
from rayform.recordings.population import population
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segments import Segments
from rayform.untrusted import parsing


@dataclass(frozen=True)
class Thresholds:
    """Where each health signal flags: ``recordings.health.THRESHOLDS``, then ``everywhere``'s
    (kind -> value), then a site's own (``sites``: site -> kind -> value)."""

    everywhere: Mapping[str, float] = field(default_factory=dict)
    sites: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kinds in (self.everywhere, *self.sites.values()):
            for kind, value in kinds.items():
                if kind not in health.THRESHOLDS or isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not value >= health.KEPT_FROM * health.THRESHOLDS[kind]:
                    low = {k: round(health.KEPT_FROM * v, 6) for k, v in health.THRESHOLDS.items()}
                    raise InvalidInput(f"threshold {str(kind)[:40]}={str(value)[:20]}: a signal of "
                                       f"{', '.join(health.THRESHOLDS)}, at least a quarter of its default (the "
                                       f"catalog keeps findings from there: {low})")

    def of(self, site: str) -> dict[str, float]:
        return {**health.THRESHOLDS, **self.everywhere, **self.sites.get(site, {})}

    def crossed(self, site: str, finding: Mapping[str, Any]) -> bool:
        return health.flagged(finding, self.of(site))

    def lowers(self) -> bool:
        """Whether any threshold is under the ingest's (so a row it did not flag may be flagged)."""
        return any(v < health.THRESHOLDS[k] for kinds in (self.everywhere, *self.sites.values())
                   for k, v in kinds.items())


@dataclass
class Checked:
    """One episode and what is flagged in it."""

    id: str
    name: str
    site: str
    version: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    start_ns: int = 0  # the episode's first timestamp: findings are told in seconds from it


def measure(seg: Segment) -> dict[str, Any]:
    """A stored segment's health summary, measured from its stored streams (as ingest does)."""
    found: list[health.Finding] = []
    arrays = []
    stamps = {}
    for name, info in seg.streams.items():
        ts = stamps[name] = seg.timestamps(name)
        found += health.timing(name, ts)
        if info.kind == "pose":
            found += health.arrays(name, ts, seg.values(name), "pose")
        elif info.kind != "image":
            values = seg.values(name)
            arrays.append((name, ts, values))
            try:
                limits = health.declared_limits(info.meta.get("limits"), int(np.prod(info.shape)))
            except ValueError:  # a manifest's limits that make no sense declare nothing to measure against
                limits = None
            if limits is not None:
                found += health.out_of_range(name, ts, values, limits)
        elif info.video is not None:
            video = seg.video(name)
            found += health.video(name, ts, video.packet_times, seg.frame_sizes(name), video.keys)
        elif info.encoding == "raw":
            found += health.frames(name, ts, np.stack([seg.frame_array(name, i) for i in range(info.count)]))
        else:
            found += health.frames(name, ts, [seg.frame_view(name, i) for i in range(info.count)])
    return health.summary(found + health.arrays_together(arrays) + health.spans(stamps))


_OPENED: dict[StoreRef, Segments] = {}  # a process's stores, opened once for its jobs


def measure_stored(job: tuple[StoreRef, str, str]) -> dict[str, Any]:
    """``measure`` of a segment version named by ``(store, id, version)``: a job any executor's
    processes run (it pickles; each process opens the store once)."""
    ref, segment_id, version = job
    segments = _OPENED.get(ref)
    if segments is None:
        segments = _OPENED[ref] = Segments(ref.open())
    return measure(segments.get(segment_id, version))


def check(table: Any, measured: Callable[[list[tuple[str, str]]], Iterable[dict[str, Any]]],
          thresholds: Thresholds | None = None) -> list[Checked]:
    """The flagged episodes of a catalog table (columns id, name, site, version, task,
    duration_s, start_ns, stream_names, health, flags), column by column: the findings stored
    at ingest (parsed only for rows flagged, unless ``thresholds`` lower some), those of rows
    never measured (``measured`` gives the summary of each ``(id, version)`` asked, in order:
    ``measure_stored`` on any executor), and the population's; only the rows with a finding
    become Python objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    thresholds = thresholds or Thresholds()
    findings: dict[int, list[dict[str, Any]]] = {}
    health_column = table.column("health")
    if thresholds.lowers():  # a finding under the ingest's thresholds may cross these: every measured row read
        candidates = np.flatnonzero(health_column.is_valid().to_numpy(zero_copy_only=False))
    else:
        candidates = np.flatnonzero(pc.fill_null(pc.list_value_length(table.column("flags")), 0)
                                    .to_numpy(zero_copy_only=False))
    picked = table.take(pa.array(candidates, pa.int64())).select(["site", "health"]).to_pylist()
    for i, r in zip(candidates.tolist(), picked):
        with parsing(f"the catalog of site {r['site']}: a row's health"):
            doc = json.loads(r["health"])
        mine = [f for f in health.kept(doc) if thresholds.crossed(r["site"], f)]
        if mine:
            findings[i] = mine
    unmeasured = np.flatnonzero(health_column.is_null().to_numpy(zero_copy_only=False))
    rows = table.take(pa.array(unmeasured, pa.int64())).select(["id", "version", "site"]).to_pylist()
    summaries = measured([(r["id"], r["version"]) for r in rows])
    for row, r, summary in zip(unmeasured.tolist(), rows, summaries):
        found = [f for f in summary["findings"] if thresholds.crossed(r["site"], f)]
        if found:
            findings[row] = found
    for row, found in population(table).items():
        findings.setdefault(row, []).extend(found)
    at = sorted(findings)
    shown = table.take(pa.array(at, pa.int64())).select(["id", "name", "site", "version", "start_ns"]).to_pylist()
    return [Checked(r["id"], r["name"], r["site"], r["version"], findings[i], r["start_ns"] or 0)
            for i, r in zip(at, shown)]


def describe(finding: dict[str, Any], start_ns: int) -> str:
    """A finding in words: what, which stream, where in the episode (seconds from its start)."""
    kind, stream = finding["kind"], finding.get("stream", "")
    if kind == "duration":
        return f"duration {finding['seconds']:.1f} s (its site and task's usual {finding['usual']:.1f} s)"
    if kind == "missing_stream":
        return f"missing_stream {stream} (its site's episodes have it)"
    t0, t1 = (finding["start_ns"] - start_ns) / 1e9, (finding["end_ns"] - start_ns) / 1e9
    where = f"at {t0:.2f} s" if t0 == t1 else f"{t0:.2f}–{t1:.2f} s"
    units = {"frozen": " s", "gap": " s", "dropped": " of its frames", "constant": " elements never change",
             "blank": " frames", "duplicate_time": " repeated times", "spike": " robust z",
             "pose_jump": " robust z", "out_of_range": " samples outside its declared limits"}.get(kind, "")
    value = f"{finding['value']:.0%}" if kind == "dropped" else f"{finding['value']:g}"
    return f"{kind} {stream} {where} ({value}{units})"
