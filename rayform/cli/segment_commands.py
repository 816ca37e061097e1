"""``rayform segments``: the latest version of each segment, listed (by query) from the sites'
catalogs, and the catalogs compacted."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

from rayform.cli.commands import store_client
from rayform.cli.words import plural
from rayform.client import Client
from rayform.errors import InvalidInput


def segments_ls(args: argparse.Namespace) -> int:
    """The latest version of each segment, site by site in the order recorded; printed as it is
    read (a --limit stops early)."""
    client = store_client(args)
    if args.limit is not None and args.limit < 0:
        raise InvalidInput(f"--limit {args.limit}: a number of segments, 0 or more")
    where = args.where if not args.flagged else "flagged" if args.where is None else f"flagged and ({args.where})"
    rows = listing(client, args.site, where)
    if client.store.offline and not args.json:
        print(f"offline: the segments the cache {client.store.cache_root} holds of {client.store.display}")
    shown = 0
    if args.json:
        print("[", end="")
    for row in rows:
        if args.limit is not None and shown >= args.limit:
            break
        if args.json:
            print(("," if shown else "") + json.dumps({k: row[k] for k in ("id", "version", "site", "name", "task",
                                                                          "duration_s", "flags")}))
        else:
            if not shown:
                print(f"{'segment':16}  {'version':12}  {'site':12}  {'seconds':>8}  name", flush=True)
            flags = f"  [{', '.join(row['flags'])}]" if row.get("flags") else ""
            print(f"{row['id']:16}  {row['version'][:12]}  {row['site']:12}  {_seconds(row['duration_s'])}  {row['name']}"
                  f"{flags}")
        shown += 1
    if args.json:
        print("]")
    elif not shown:
        print("no segments" + (f" at site {args.site!r}" if args.site else "")
              + (f" where {where}" if where else "") + f" in {client.store.display}")
    return 0


def _seconds(value: float | None) -> str:
    return f"{value:8.1f}" if value is not None else f"{'-':>8}"


def listing(client: Client, site: str | None, where: str | None) -> Iterator[dict[str, Any]]:
    """Each segment's latest row (catalog columns), site by site in the order recorded, a batch
    at a time (no sort: a million rows start printing as soon as they are read)."""
    from rayform.recordings import query
    from rayform.recordings.segment_writer import check_site

    shown = ["id", "version", "site", "name", "task", "duration_s", "flags"]
    q = query.Query(where) if where is not None else None
    # read whole, selected a batch at a time (a million rows start printing as soon as they are read)
    table = client.segments.catalog.select(site=check_site(site) if site else None,
                                           columns=[*shown, "recorded", *(query.COLUMNS_READ if q else ())])
    for start in range(0, table.num_rows, 4096):
        batch = table.slice(start, 4096)
        yield from (q.select(batch) if q is not None else batch).select(shown).to_pylist()


def segments_compact(args: argparse.Namespace) -> int:
    client = store_client(args, writes=True)
    catalog = client.segments.catalog
    sites = args.site or catalog.sites()
    if not sites:
        print(f"no segments in {client.store.display}: nothing to compact")
    for site in sites:
        done = client.segments.compact(site)
        if done is None:
            print(f"site {site}: one part already ({plural(sum(catalog.part_rows(site)), 'row')})")
        else:
            print(f"site {site}: {plural(len(done.replaces), 'part')} and {plural(done.legacy, 'per-segment ref')} "
                  f"folded into one of {plural(done.part.rows, 'row')} ({done.part.key})")
    return 0
