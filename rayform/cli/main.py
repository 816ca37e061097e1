"""The ``rayform`` command.

Every failure is one line on stderr, ``rayform: error: <what failed>. <how to fix it>``:
exit 2 for user and data errors (every RayformError: a bad argument, a missing slice, a
corrupt or hostile store, offline), 1 for anything else (a bug, the machine), and 1 from
``verify`` when it finds bad blobs. A traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rayform.errors import RayformError

EXIT_USER = 2
EXIT_CORRUPT = 1  # bad blobs found by verify, and any failure that is not a RayformError


def _parser() -> argparse.ArgumentParser:
    from rayform.cli import commands as c

    p = argparse.ArgumentParser(prog="rayform", description="Robot recordings into training data that streams.")
    p.add_argument("--store", help="store URL (default: $RAYFORM_STORE, else ~/.local/share/rayform/store)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = sub.add_parser("demo", help="fill the store with a simulated demo site and slice; print the slice id")
    d.add_argument("--site", default="demo")
    d.add_argument("--episodes", type=int, default=6)
    d.add_argument("--seconds", type=float, default=10.0)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(run=c.demo)

    seg = sub.add_parser("segments", help="segments in the store").add_subparsers(dest="action", required=True)
    ls = seg.add_parser("ls", help="list segments (latest versions)")
    ls.add_argument("--site")
    ls.set_defaults(run=c.segments_ls)

    sl = sub.add_parser("slices", help="slices in the store").add_subparsers(dest="action", required=True)
    cr = sl.add_parser("create", help="create a slice; prints its id")
    cr.add_argument("--site", action="append", default=[], help="every segment at this site (repeatable)")
    cr.add_argument("--segment", action="append", default=[], help="a segment id, or id@version (repeatable)")
    cr.add_argument("--name")
    cr.set_defaults(run=c.slices_create)
    sl.add_parser("ls", help="list slices").set_defaults(run=c.slices_ls)
    sh = sl.add_parser("show", help="a slice's segments, streams and packs")
    sh.add_argument("slice")
    sh.set_defaults(run=c.slices_show)

    pk = sub.add_parser("pack", help="pack a slice into shards at an fps")
    pk.add_argument("slice")
    pk.add_argument("--fps", type=float, required=True)
    pk.add_argument("--streams", help="comma-separated (default: every stream all segments share)")
    pk.add_argument("--codec", default="keep", choices=["keep", "jpeg", "png"], help="image codec (default: keep)")
    pk.add_argument("--quality", type=int, default=90, help="JPEG quality when re-encoding")
    pk.add_argument("--resize", help="HxW, e.g. 224x224 (re-encodes)")
    pk.add_argument("--horizon", type=int, default=16, help="maximum action horizon, in steps")
    pk.add_argument("--shard-size", default="64MiB", help="target shard size (default 64MiB)")
    pk.add_argument("--staleness", type=float, default=1.5, help="alignment tolerance in stream periods")
    pk.add_argument("--interleave-seed", type=int, default=0,
                    help="seed of the permuted layout that makes every shard a uniform sample (default 0)")
    pk.add_argument("--time-order", action="store_true",
                    help="lay samples out in time order, segment after segment, not interleaved")
    pk.add_argument("--workers", type=int, help="processes (default: all cores)")
    pk.add_argument("--force", action="store_true", help="pack again even if this pack exists")
    pk.set_defaults(run=c.pack)

    ing = sub.add_parser("ingest", help="convert recordings (ros, lerobot, hdf5) into segments; prints their ids")
    ing.add_argument("format", choices=["ros", "lerobot", "hdf5"])
    ing.add_argument("paths", nargs="+", metavar="PATH")
    ing.add_argument("--site", help="the site the recordings come from (required unless --list)")
    ing.add_argument("--map", action="append", default=[], metavar="SOURCE=STREAM",
                     help="name a feature's stream (STREAM empty: skip it); repeatable")
    ing.add_argument("--map-file", help="a JSON object {source: stream or null}")
    ing.add_argument("--slice", help="also make a slice of what was ingested, with this name")
    ing.add_argument("--allow-missing", action="store_true", help="convert the episodes present even if the meta lists more")
    ing.add_argument("--fps", type=float, help="frame rate where the source does not record one (hdf5)")
    ing.add_argument("--stamp", choices=["header", "log"], default="header",
                     help="ros: the header stamp when set (default), or always the log time")
    ing.add_argument("--joints", help="ros: comma-separated joint names, in the order wanted")
    ing.add_argument("--workers", type=int, help="sources converted at once (default: all cores)")
    ing.add_argument("--list", action="store_true", help="show what each source holds; convert nothing")
    ing.set_defaults(run=c.ingest)

    pl = sub.add_parser("pull", help="fetch a slice's packs into the cache, for RAYFORM_OFFLINE=1")
    pl.add_argument("slice")
    pl.add_argument("--fps", type=float, help="only the pack at this fps (default: all packs)")
    pl.set_defaults(run=c.pull)

    sub.add_parser("cache", help="where the cache is, how big, which slices it holds whole").set_defaults(
        run=c.cache)

    v = sub.add_parser("verify", help="re-hash every blob of a slice and its packs")
    v.add_argument("slice")
    v.add_argument("--fps", type=float, help="only the packs at this fps")
    v.set_defaults(run=c.verify)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # rayform's own messages at INFO; every library's (botocore, s3fs, …) only from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("rayform").setLevel(logging.INFO)
    try:
        return int(args.run(args) or 0)
    except RayformError as e:
        if args.debug:
            raise
        print(f"rayform: error: {e}", file=sys.stderr)
        return EXIT_USER
    except KeyboardInterrupt:
        print("rayform: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        if args.debug:
            raise
        text = str(e).split("\n", 1)[0][:300]
        print(f"rayform: error: {type(e).__name__}: {text}. Run again with --debug for the traceback",
              file=sys.stderr)
        return EXIT_CORRUPT


if __name__ == "__main__":
    sys.exit(main())
