"""``rayform doctor [SLICE | --site S] [--json]``: one line per flagged episode, a summary per
kind, exit 1 when any is flagged (``rayform.ops.doctor``)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from rayform.cli.commands import store_client
from rayform.cli.words import plural
from rayform.errors import InvalidInput
from rayform.ops import doctor
from rayform.recordings.segment_writer import check_site

COLUMNS = ["id", "name", "site", "version", "task", "duration_s", "start_ns", "stream_names", "health", "flags"]


def run(args: argparse.Namespace) -> int:
    client = store_client(args)
    if args.slice and args.site:
        raise InvalidInput("doctor: name a slice or --site, not both")
    table = client.segments.catalog.latest(check_site(args.site) if args.site else None, columns=COLUMNS)
    if args.slice:
        chosen = client.slices.get(args.slice)
        wanted = {(s.id, s.version) for s in chosen.segments}
        rows = [r for r in table.to_pylist() if (r["id"], r["version"]) in wanted]
        if len(rows) < len(wanted):  # an older version than the catalog's latest: its own row
            found = {(r["id"], r["version"]) for r in rows}
            for sid, version in sorted(wanted - found):
                seg = client.segments.get(sid, version)
                rows.append({"id": sid, "name": seg.name, "site": seg.site, "version": version, "task": seg.task,
                             "duration_s": None, "start_ns": min(int(seg.timestamps(n)[0]) for n in seg.streams),
                             "stream_names": sorted(seg.streams), "health": None, "flags": None})
    else:
        rows = table.to_pylist()
    unmeasured = sum(r["health"] is None for r in rows)
    checked = doctor.check(rows, lambda sid, v: client.segments.get(sid, v),
                           _bar(unmeasured, args.quiet or args.json))
    flagged = [(c, r) for c, r in zip(checked, rows) if c.flagged]
    kinds = Counter(f["kind"] for c, _ in flagged for f in c.findings)
    if args.json:
        print(json.dumps({"episodes": len(rows), "measured_now": unmeasured, "flagged": len(flagged),
                          "kinds": dict(sorted(kinds.items())),
                          "findings": [{"id": c.id, "name": c.name, "site": c.site, "version": c.version,
                                        "findings": c.findings} for c, _ in flagged]}))
    else:
        for c, r in flagged:
            for f in c.findings:
                print(f"{c.id}  {c.name}  {doctor.describe(f, int(r['start_ns'] or 0))}")
        what = f"slice {args.slice}" if args.slice else f"site {args.site}" if args.site else client.store.display
        summary = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
        print(f"{plural(len(flagged), 'flagged episode')} of {len(rows)} in {what}"
              + (f": {summary}" if summary else "")
              + (f" ({unmeasured} measured now: ingested before health signals)" if unmeasured else ""))
    return 1 if flagged else 0


def _bar(total: int, quiet: bool) -> Any:
    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        if quiet or not total:
            return items
        from tqdm import tqdm

        bar: Iterable[Any] = tqdm(items, total=total, desc="measuring", unit="episode")
        return bar
    return wrap
