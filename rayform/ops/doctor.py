"""``rayform doctor``: the episodes a health signal flags, from the catalog.

Signals are measured at ingest (``recordings.health``) and kept in each row of the catalog, so
a million episodes report in one scan. A row from before signals were measured has none: its
segment is read and measured here (``measure``). Two signals need the population and are
computed over the rows asked about, per site and task: ``duration`` (a robust z of the
episode's length against its site-and-task's: median and MAD) and ``missing_stream`` (a stream
that at least 90% of its site's episodes have and it lacks).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayform.cache.store_view import StoreRef
from rayform.errors import InvalidInput
from rayform.recordings import health
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segments import Segments
from rayform.untrusted import parsing

DURATION_Z = 8.0  # an episode this many robust deviations from its site-and-task's median length
COMMON = 0.9  # a stream this share of a site's episodes have is expected of every one
_MIN_PEERS = 8  # fewer episodes of a site and task say nothing of what is usual


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


def population(table: Any) -> dict[int, list[dict[str, Any]]]:
    """Findings that need the population: lengths far from their site and task's, and streams
    most of a site's episodes have that one lacks. A row that does not know its length or its
    streams (a per-segment ref's, from before catalogs) is neither counted nor judged."""
    import pyarrow.compute as pc

    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    sites = _codes(table.column("site"))
    groups = _codes(pc.binary_join_element_wise(table.column("site"), pc.fill_null(table.column("task"), ""), "\0"))
    lengths = pc.fill_null(table.column("duration_s"), np.nan).to_numpy(zero_copy_only=False)
    groups = np.where(np.isnan(lengths), -1, groups)  # unknown lengths: a group of their own, never judged
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    for members in np.split(order, bounds):
        if len(members) < _MIN_PEERS or groups[members[0]] < 0:
            continue
        mine = lengths[members]
        median = float(np.median(mine))
        scale = max(health._MAD * float(np.median(np.abs(mine - median))), 0.05 * median, 1e-9)
        for j in np.flatnonzero(np.abs(mine - median) / scale >= DURATION_Z):
            out[int(members[j])].append({"kind": "duration", "stream": "", "value": round(float(
                abs(mine[j] - median) / scale), 3), "start_ns": 0, "end_ns": 0, "seconds": float(mine[j]),
                "usual": round(median, 3)})
    names = table.column("stream_names")
    flat = pc.list_flatten(names)
    if not len(flat):
        return out
    known = names.is_valid().to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(names).to_numpy(zero_copy_only=False)  # ascending: row by row
    encoded = pc.dictionary_encode(flat).combine_chunks()
    streams, vocabulary = encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()
    per_site = np.bincount(sites[known], minlength=sites.max() + 1)
    pairs = np.bincount(sites[parents] * len(vocabulary) + streams, minlength=len(per_site) * len(vocabulary))
    common = (pairs.reshape(len(per_site), len(vocabulary)) >= COMMON * per_site[:, None]) & \
        (per_site[:, None] >= _MIN_PEERS)
    have = np.bincount(parents[common[sites[parents], streams]], minlength=len(sites))
    starts = np.searchsorted(parents, np.arange(len(sites)), side="left")
    ends = np.searchsorted(parents, np.arange(len(sites)), side="right")
    for i in np.flatnonzero(known & (have < common.sum(axis=1)[sites])):  # a row lacking one its site's have
        present = set(streams[starts[i]:ends[i]].tolist())
        for k in np.flatnonzero(common[sites[i]]):
            if int(k) not in present:
                out[int(i)].append({"kind": "missing_stream", "stream": vocabulary[k], "value": 1.0, "start_ns": 0,
                                    "end_ns": 0})
    return out


def _codes(column: Any) -> np.ndarray:
    """A text column's values as small integers (equal text, equal code)."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column).combine_chunks()
    codes: np.ndarray = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes


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
