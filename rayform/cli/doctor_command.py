"""``rayform doctor [SLICE | --site S] [--json]``: one line per flagged episode, a summary per
kind, exit 1 when any is flagged (``rayform.ops.diagnosis``, ``rayform.ops.doctor``)."""

from __future__ import annotations

import argparse
import json

from rayform.cli.commands import store_client
from rayform.cli.words import plural
from rayform.errors import InvalidInput
from rayform.jobs import Run
from rayform.ops import doctor
from rayform.ops.diagnosis import diagnose


def run(args: argparse.Namespace) -> int:
    client = store_client(args)
    found = diagnose(client, args.slice, args.site, _thresholds(args),
                     Run(workers=args.workers, progress=not (args.quiet or args.json)))
    if args.json:
        print(json.dumps({"episodes": found.episodes, "measured_now": found.measured_now,
                          "flagged": len(found.flagged), "kinds": found.kinds,
                          "findings": [{"id": c.id, "name": c.name, "site": c.site, "version": c.version,
                                        "findings": c.findings} for c in found.flagged]}))
    else:
        for c in found.flagged:
            for f in c.findings:
                print(f"{c.id}  {c.name}  {doctor.describe(f, c.start_ns)}")
        what = f"slice {args.slice}" if args.slice else f"site {args.site}" if args.site else client.store.display
        summary = ", ".join(f"{kind} {n}" for kind, n in found.kinds.items())
        print(f"{plural(len(found.flagged), 'flagged episode')} of {found.episodes} in {what}"
              + (f": {summary}" if summary else "")
              + (f" ({found.measured_now} measured now: ingested before health signals)" if found.measured_now else ""))
    return 1 if found.flagged else 0


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
