"""``rayform ingest FORMAT PATH... --site S``: its flags as the ingest's options (``--map``,
``--limits``, a source's storage options), ``--list``'s description, and the segments stored."""

from __future__ import annotations

import argparse

from rayform.cli.commands import storage_options, store_client
from rayform.errors import InvalidInput


def _mapping(args: argparse.Namespace) -> dict[str, str | None]:
    import json

    mapping: dict[str, str | None] = {}
    if args.map_file:
        try:
            with open(args.map_file) as f:
                mapping.update(json.load(f))
        except (OSError, ValueError) as e:
            raise InvalidInput(f"{args.map_file}: cannot read the mapping ({e})") from None
    for item in args.map:
        source, sep, stream = item.partition("=")
        if not sep or not source:
            raise InvalidInput(f"--map {item!r}: write it as SOURCE=STREAM (or SOURCE= to skip it)")
        mapping[source] = stream or None
    return mapping


def _limits(given: list[str]) -> dict[str, tuple[float, float]]:
    """``--limits STREAM=LOW:HIGH`` (repeatable) as stream -> (low, high)."""
    limits = {}
    for pair in given:
        name, _, bounds = pair.partition("=")
        low, sep, high = bounds.partition(":")
        try:
            limits[name.strip()] = (float(low), float(high))
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise InvalidInput(f"--limits {pair[:60]!r}: write it as STREAM=LOW:HIGH, e.g. "
                               "--limits joints/position=-3.14:3.14")
    return limits


def run(args: argparse.Namespace) -> int:
    from rayform.converters.formats import describe
    from rayform.converters.ingest import ingest as ingest_sources
    from rayform.jobs import Run

    source = {"mapping": _mapping(args), "storage_options": storage_options(args.source_option) or None,
              "task_key": args.task_key}
    if args.list:
        for path in args.paths:
            print("\n".join(describe(args.format, path, args.fps, source)))
        return 0
    if not args.site:
        raise InvalidInput("ingest: --site is required (where the recordings come from)")
    client = store_client(args, writes=True)
    options = {**source, "allow_missing": args.allow_missing, "fps": args.fps, "stamp": args.stamp,
               "joints": [j.strip() for j in args.joints.split(",")] if args.joints else None, "task": args.task,
               "allow_nonfinite": args.allow_nonfinite, "decode_video": args.decode_video, "splits": args.split or None,
               "limits": _limits(args.limits)}
    report = ingest_sources(client, args.format, args.paths, args.site, options=options, slice_name=args.slice,
                            run=Run(workers=args.workers, progress=not args.quiet))
    for ref in report.segments:
        print(f"{ref.id}  {ref.version[:12]}  {ref.site}  {ref.name}")
    if report.slice is not None:
        print(report.slice.id)
    return 0
