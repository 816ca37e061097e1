"""``rayform doctor [SLICE | --site S] [--json]``: one line per flagged episode, a summary per
kind, exit 1 when any is flagged (``rayform.ops.doctor``)."""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from rayform.cli.commands import store_client
from rayform.cli.words import plural
from rayform.errors import InvalidInput
from rayform.jobs import JobRunner
from rayform.ops import doctor
from rayform.recordings.segment_writer import check_site

PER_PROCESS = 50  # unmeasured segments that one process measures faster than a pool starts
COLUMNS = ["id", "name", "site", "version", "task", "duration_s", "start_ns", "stream_names", "health", "flags"]


def run(args: argparse.Namespace) -> int:
    client = store_client(args)
    if args.slice and args.site:
        raise InvalidInput("doctor: name a slice or --site, not both")
    if args.slice:
        table = _of_slice(client, args.slice)
    else:
        table = client.segments.catalog.latest(check_site(args.site) if args.site else None, columns=COLUMNS)
    unmeasured = table.column("health").null_count
    workers = args.workers or ((os.cpu_count() or 1) if unmeasured > PER_PROCESS else 1)
    bar = _bar(unmeasured, args.quiet or args.json)

    def measured(versions: list[tuple[str, str]]) -> Iterator[dict[str, Any]]:
        ref = client.store.ref
        with JobRunner(None, workers) as jobs:  # segments ingested before signals: measured now, in parallel
            yield from bar(jobs.each(doctor.measure_stored, [(ref, sid, v) for sid, v in versions]))

    flagged = doctor.check(table, measured, _thresholds(args))
    kinds = Counter(f["kind"] for c in flagged for f in c.findings)
    if args.json:
        print(json.dumps({"episodes": table.num_rows, "measured_now": unmeasured, "flagged": len(flagged),
                          "kinds": dict(sorted(kinds.items())),
                          "findings": [{"id": c.id, "name": c.name, "site": c.site, "version": c.version,
                                        "findings": c.findings} for c in flagged]}))
    else:
        for c in flagged:
            for f in c.findings:
                print(f"{c.id}  {c.name}  {doctor.describe(f, c.start_ns)}")
        what = f"slice {args.slice}" if args.slice else f"site {args.site}" if args.site else client.store.display
        summary = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
        print(f"{plural(len(flagged), 'flagged episode')} of {table.num_rows} in {what}"
              + (f": {summary}" if summary else "")
              + (f" ({unmeasured} measured now: ingested before health signals)" if unmeasured else ""))
    return 1 if flagged else 0


def _thresholds(args: argparse.Namespace) -> doctor.Thresholds:
    everywhere = {}
    for pair in args.threshold:
        kind, sep, value = pair.partition("=")
        try:
            everywhere[kind.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise InvalidInput(f"--threshold {pair[:60]!r}: write it as SIGNAL=VALUE, e.g. --threshold spike=20")
    sites: dict[str, dict[str, float]] = {}
    if args.site_thresholds:
        from pathlib import Path

        from rayform.converters.source_json import source_json

        try:
            doc = source_json(Path(args.site_thresholds).read_text(), args.site_thresholds)
        except OSError as e:
            raise InvalidInput(f"--site-thresholds {args.site_thresholds}: cannot read it ({e.strerror})") from None
        if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
            raise InvalidInput(f"--site-thresholds {args.site_thresholds}: a JSON object {{site: {{signal: value}}}}")
        sites = {str(site): dict(kinds) for site, kinds in doc.items()}
    return doctor.Thresholds(everywhere, sites)


def _of_slice(client: Any, name: str) -> Any:
    """The catalog's rows of a slice's segment versions, older versions' included with the
    health measured when they were written (one row a version); a version no catalog row lists
    (a store from before catalogs) gets a row from its manifest, its health measured now."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from rayform.recordings.catalog_parts import unique_versions

    chosen = client.slices.get(name)
    wanted = {f"{s.id}@{s.version}" for s in chosen.segments}
    table = client.segments.catalog.table(columns=[*COLUMNS, "recorded"])
    keys = pc.binary_join_element_wise(table.column("id"), table.column("version"), "@")
    # one row a version (concurrent compactions may have left two), by the rule every reader keeps
    mine = unique_versions(table.filter(pc.is_in(keys, value_set=pa.array(sorted(wanted), pa.string())))).select(COLUMNS)
    older = sorted(wanted - set(pc.binary_join_element_wise(mine.column("id"), mine.column("version"), "@")
                                .to_pylist()))
    if not older:
        return mine
    rows = []
    for key in older:
        sid, version = key.split("@")
        seg = client.segments.get(sid, version)
        start = min(int(seg.timestamps(n)[0]) for n in seg.streams)
        end = max(int(seg.timestamps(n)[-1]) for n in seg.streams)
        rows.append({"id": sid, "name": seg.name, "site": seg.site, "version": version, "task": seg.task,
                     "duration_s": (end - start) / 1e9, "start_ns": start, "stream_names": sorted(seg.streams),
                     "health": None, "flags": None})
    return pa.concat_tables([mine, pa.Table.from_pylist(rows, schema=mine.schema)])


def _bar(total: int, quiet: bool) -> Any:
    def wrap(items: Iterable[Any]) -> Iterable[Any]:
        if quiet or not total:
            return items
        from tqdm import tqdm

        bar: Iterable[Any] = tqdm(items, total=total, desc="measuring", unit="episode")
        return bar
    return wrap
