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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayform.recordings import health
from rayform.recordings.segment_reader import Segment

DURATION_Z = 8.0  # an episode this many robust deviations from its site-and-task's median length
COMMON = 0.9  # a stream this share of a site's episodes have is expected of every one
_MIN_PEERS = 8  # fewer episodes of a site and task say nothing of what is usual


@dataclass
class Checked:
    """One episode and what is flagged in it."""

    id: str
    name: str
    site: str
    version: str
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return bool(self.findings)


def measure(seg: Segment) -> dict[str, Any]:
    """A stored segment's health summary, measured from its stored streams (as ingest does)."""
    found: list[health.Finding] = []
    arrays = []
    for name, info in seg.streams.items():
        ts = seg.timestamps(name)
        found += health.timing(name, ts)
        if info.kind == "pose":
            found += health.arrays(name, ts, seg.values(name), "pose")
        elif info.kind != "image":
            arrays.append((name, ts, seg.values(name)))
        elif info.video is not None:
            video = seg.video(name)
            found += health.video(name, ts, video.packet_times, seg.frame_sizes(name), video.keys)
        elif info.encoding == "raw":
            found += health.frames(name, ts, np.stack([seg.frame_array(name, i) for i in range(info.count)]))
        else:
            found += health.frames(name, ts, [seg.frame_view(name, i) for i in range(info.count)])
    return health.summary(found + health.arrays_together(arrays))


def check(rows: Sequence[dict[str, Any]], open_segment: Callable[[str, str], Segment],
          progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda x: x) -> list[Checked]:
    """Each row (catalog columns id, name, site, version, task, duration_s, stream_names, health,
    flags) checked: its stored findings (measured now where it has none), and the population's."""
    out = []
    unmeasured = [r for r in rows if r.get("health") is None]
    measured = {(r["id"], r["version"]): measure(open_segment(r["id"], r["version"])) for r in progress(unmeasured)}
    for r in rows:
        doc = measured.get((r["id"], r["version"]))
        if doc is None:  # measured at ingest: its findings are read only where it was flagged
            doc = json.loads(r["health"]) if r.get("flags") else {}
        out.append(Checked(r["id"], r["name"], r["site"], r["version"], list(doc.get("findings", []))))
    _population(rows, out)
    return out


def _population(rows: Sequence[dict[str, Any]], out: list[Checked]) -> None:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    sites: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["site"], r.get("task") or "")].append(i)
        sites[r["site"]].append(i)
    for members in groups.values():
        lengths = np.array([rows[i].get("duration_s") or 0.0 for i in members])
        if len(members) < _MIN_PEERS:
            continue
        median = float(np.median(lengths))
        scale = max(health._MAD * float(np.median(np.abs(lengths - median))), 0.05 * median, 1e-9)
        for j, z in enumerate(np.abs(lengths - median) / scale):
            if z >= DURATION_Z:
                out[members[j]].findings.append({"kind": "duration", "stream": "", "value": round(float(z), 3),
                                                 "start_ns": 0, "end_ns": 0, "seconds": float(lengths[j]),
                                                 "usual": round(median, 3)})
    for members in sites.values():
        if len(members) < _MIN_PEERS:
            continue
        counts = Counter(s for i in members for s in (rows[i].get("stream_names") or []))
        common = {s for s, n in counts.items() if n >= COMMON * len(members)}
        for i in members:
            for s in sorted(common - set(rows[i].get("stream_names") or [])):
                out[i].findings.append({"kind": "missing_stream", "stream": s, "value": 1.0, "start_ns": 0,
                                        "end_ns": 0})


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
             "pose_jump": " robust z"}.get(kind, "")
    value = f"{finding['value']:.0%}" if kind == "dropped" else f"{finding['value']:g}"
    return f"{kind} {stream} {where} ({value}{units})"
