"""The ``rayform`` command's arguments: every command, its options and their bounds (``main``
runs them)."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from rayform import __version__
from rayform.pack.spec import CODECS

EXIT_USER = 2


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line (not the usage block, then the error),
    naming where the whole usage is."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER, f"{self.prog}: error: {message}. See: {self.prog} --help\n")


def _whole(low: int, high: int | None = None) -> Any:
    """An argparse type: a whole number from ``low`` (to ``high``), else one usage error naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value}: it must be {low} or more" if high is None else
                                             f"{value}: it must be from {low} to {high}")
        return value
    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


def _crf(text: str) -> int | float:
    """A CRF: a number (its range and steps are its codec's: the pack checks them, ``codecs.crf_value``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    return int(value) if value.is_integer() else value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text[:40]} must be a number above 0")
    return value


def _command(sub: Any, common: argparse.ArgumentParser, name: str, **kw: Any) -> argparse.ArgumentParser:
    """A (sub)command's parser, which takes the global options too."""
    parser: argparse.ArgumentParser = sub.add_parser(name, parents=[common], **kw)
    return parser


def parser() -> argparse.ArgumentParser:
    from rayform.cli import cache_commands as cc
    from rayform.cli import commands as c
    from rayform.cli import doctor_command as dc
    from rayform.cli import ingest_command as ic
    from rayform.cli import segment_commands as sc
    from rayform.codec.codecs import JPEG_DISTANCE_DB, VIDEO
    from rayform.converters.formats import FORMATS

    # The global options, accepted before the command and after it (SUPPRESS: a subcommand's
    # parser leaves a value given before the command as it was).
    common = _Parser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS,
                        help="store URL (default: $RAYFORM_STORE, else ~/.local/share/rayform/store)")
    common.add_argument("-o", "--option", action="append", default=argparse.SUPPRESS, metavar="KEY=VALUE",
                        help="a storage option for fsspec, e.g. -o endpoint_url=http://localhost:9000 (repeatable)")
    common.add_argument("--cache", default=argparse.SUPPRESS,
                        help="shard cache directory (default: $RAYFORM_CACHE_DIR, else ~/.cache/rayform)")
    common.add_argument("--profile", default=argparse.SUPPRESS,
                        help="settings from this profile of the config file ($RAYFORM_CONFIG, else "
                             "~/.config/rayform/config.toml; default: $RAYFORM_PROFILE, else [default])")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of a failure")

    p = _Parser(prog="rayform", description="Robot recordings into training data that streams.",
                                parents=[common])
    p.add_argument("--version", action="version", version=f"rayform {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    d = _command(sub, common, "demo", help="fill the store with a simulated demo site and slice; print the slice id")
    d.add_argument("--site", default="demo", help="the site the demo segments belong to (default demo)")
    d.add_argument("--episodes", type=_whole(1), default=6, help="simulated episodes (default 6)")
    d.add_argument("--seconds", type=_positive, default=10.0, help="length of each episode (default 10)")
    d.add_argument("--seed", type=int, default=0, help="seed of the simulation (default 0)")
    d.set_defaults(run=c.demo)

    shw = _command(sub, common, "show", help="what a slice or a segment holds: streams, rates, durations, packs")
    shw.add_argument("id", help="a slice (its id, slc_…, or name) or a segment id (seg_…)")
    shw.add_argument("--segments", type=_whole(0), default=5, help="segments of a slice shown in full (default 5)")
    shw.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    shw.set_defaults(run=c.show)

    seg = _command(sub, common, "segments", help="segments in the store").add_subparsers(dest="action", required=True)
    ls = _command(seg, common, "ls", help="list segments (latest versions), site by site in the order recorded")
    ls.add_argument("--site", help="only this site's segments")
    ls.add_argument("--where", metavar="QUERY", help="only those a query selects, e.g. \"task ~ 'pick' and duration > 10\"")
    ls.add_argument("--flagged", action="store_true", help="only those a health signal flags (rayform doctor says why)")
    ls.add_argument("--limit", type=_whole(0), metavar="N", help="only the first N")
    ls.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    ls.set_defaults(run=sc.segments_ls)
    cp = _command(seg, common, "compact", help="fold a site's catalog parts (and per-segment refs) into one")
    cp.add_argument("--site", action="append", default=[], help="this site (repeatable; default: every site)")
    cp.set_defaults(run=sc.segments_compact)

    sl = _command(sub, common, "slices", help="slices in the store").add_subparsers(dest="action", required=True)
    cr = _command(sl, common, "create", help="create a slice; prints its id")
    cr.add_argument("--site", action="append", default=[], help="every segment at this site (repeatable)")
    cr.add_argument("--where", metavar="QUERY",
                    help="every segment a query over the catalog selects (at --site, else everywhere), e.g. "
                         "\"task ~ 'pick' and duration > 10 and meta.success\"")
    cr.add_argument("--segment", action="append", default=[], help="a segment id, or id@version (repeatable)")
    cr.add_argument("--name", help="a name for the slice (part of its content, so of its id)")
    cr.set_defaults(run=c.slices_create)
    sls = _command(sl, common, "ls", help="list slices")
    sls.add_argument("--json", action="store_true", help="one JSON list, for scripts")
    sls.set_defaults(run=c.slices_ls)
    sh = _command(sl, common, "show", help="a slice's segments, streams and packs")
    sh.add_argument("slice", help="the slice: its id (slc_…) or name")
    sh.set_defaults(run=c.slices_show)
    sp = _command(sl, common, "split", help="segment-disjoint child slices, e.g. train=0.9 val=0.1 (by segment id hash)")
    sp.add_argument("slice", help="the slice: its id (slc_…) or name")
    sp.add_argument("shares", nargs="+", metavar="NAME=SHARE", help="each split's name and share; shares sum to 1")
    sp.add_argument("--seed", type=int, default=0, help="which segments go where (default 0)")
    sp.set_defaults(run=c.slices_split)

    pk = _command(sub, common, "pack", help="pack a slice into shards at an fps")
    pk.add_argument("slice", help="the slice: its id (slc_…) or name")
    pk.add_argument("--fps", type=float, required=True, help="samples per second of recording")
    pk.add_argument("--streams", help="comma-separated (default: every stream all segments share)")
    pk.add_argument("--codec", default="keep", choices=list(CODECS),
                    help="image codec: keep (recorded images and video as they are), jpeg, png, or video: "
                         f"{', '.join(VIDEO)} (default: keep)")
    pk.add_argument("--quality", type=_whole(1, 100), help="with --codec jpeg: re-encode every camera at this JPEG quality, "
                    "recorded JPEGs too (without it they are kept untouched, and other frames encoded at 90)")
    pk.add_argument("--psnr", type=float, metavar="DB",
                    help="with a video codec: the quality to meet, in dB PSNR against the frames packed; the largest "
                         "CRF that meets it on a sample of clips is used (the fewest bytes). show prints what a pack "
                         "measured, and JPEG q90's figure beside it")
    pk.add_argument("--crf", type=_crf, help="video quality, lower is better and larger (h264 and hevc take halves; "
                    "default: chosen "
                    f"per camera, the largest CRF within {JPEG_DISTANCE_DB:g} dB of JPEG q90's PSNR on its sampled "
                    "clips; where not measured: " + ", ".join(f"{codec} {c.crf}" for codec, c in VIDEO.items()) + ")")
    pk.add_argument("--preset", help="video encoder speed (default: "
                    + ", ".join(f"{codec} {c.preset}" for codec, c in VIDEO.items()) + ")")
    pk.add_argument("--clip-frames", type=_whole(1, 256),
                    help="samples per video clip, the unit a pack's order shuffles (default 8; 64 with --history, a "
                         "keyframe every 8 inside, so history frames are stored once)")
    pk.add_argument("--gop", type=_whole(1, 256), help="samples from one keyframe to the next inside a video clip (default: the "
                    "whole clip; 8 with --history and no --clip-frames)")
    pk.add_argument("--resize", help="HxW, e.g. 224x224 (re-encodes)")
    pk.add_argument("--horizon", type=_whole(0), default=16,
                    help="maximum action horizon, in steps (default 16; the Python API's max_horizon=)")
    pk.add_argument("--history", type=_whole(0), default=0,
                    help="past steps each sample carries for observation history (default 0)")
    pk.add_argument("--shard-size", default="64MiB", help="target shard size (default 64MiB)")
    pk.add_argument("--staleness", type=float, default=1.5,
                    help="alignment tolerance, in periods of each stream's own rate (default 1.5)")
    pk.add_argument("--snap", type=float, default=0.01,
                    help="a timestamp this fraction of its stream's period after an instant counts as at it (default 0.01)")
    pk.add_argument("--interleave-seed", type=int, default=0,
                    help="seed of the permuted layout that makes every shard a uniform sample (default 0)")
    pk.add_argument("--time-order", action="store_true",
                    help="lay samples out in time order, segment after segment, not interleaved")
    pk.add_argument("--workers", type=_whole(1), help="processes (default: all cores)")
    pk.add_argument("--force", action="store_true", help="pack again even if this pack exists")
    pk.set_defaults(run=c.pack)

    ing = _command(sub, common, "ingest", help="convert recordings (ros, lerobot, hdf5, rlds) into segments; prints their ids")
    ing.add_argument("format", choices=sorted(FORMATS), help="the recordings' format")
    ing.add_argument("paths", nargs="+", metavar="PATH", help="bag files or folders, LeRobot folders, HDF5 files, "
                     "RLDS dataset folders (<name>/<version>)")
    ing.add_argument("--site", help="the site the recordings come from (required unless --list)")
    ing.add_argument("--map", action="append", default=[], metavar="SOURCE=STREAM",
                     help="name a feature's stream (STREAM empty: skip it); repeatable")
    ing.add_argument("--map-file", help="a JSON object {source: stream or null}")
    ing.add_argument("--slice", help="also make a slice of what was ingested, with this name")
    ing.add_argument("--allow-missing", action="store_true", help="convert the episodes present even if the meta lists more")
    ing.add_argument("--fps", type=float, help="frame rate where the source does not record one (hdf5, rlds)")
    ing.add_argument("--split", action="append", default=[], help="an RLDS split to ingest (repeat; default: all)")
    ing.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                     help="a storage option of the sources (s3://, gs://), e.g. --source-option "
                          "endpoint_url=http://host:9000; repeatable. -o applies to the store only")
    ing.add_argument("--task-key", metavar="FEATURE",
                     help="rlds: the text feature (below steps/) that is each episode's task, where several are")
    ing.add_argument("--stamp", choices=["header", "log"], default="header",
                     help="ros: the header stamp when set (default), or always the log time")
    ing.add_argument("--joints", help="ros: comma-separated joint names, in the order wanted")
    ing.add_argument("--task", help="the task or language instruction of every episode (lerobot: over its own)")
    ing.add_argument("--limits", action="append", default=[], metavar="STREAM=LOW:HIGH",
                     help="the range an array stream's values keep to (a joint's limits; repeatable): samples "
                          "outside are flagged out_of_range (rayform doctor)")
    ing.add_argument("--allow-nonfinite", action="store_true",
                     help="keep NaN and infinite values in array streams (refused by default; statistics skip them)")
    ing.add_argument("--decode-video", action="store_true",
                     help="lerobot: decode its videos into JPEG frames (default: keep the video as recorded)")
    ing.add_argument("--workers", type=_whole(1), help="sources converted at once (default: all cores)")
    ing.add_argument("--list", action="store_true", help="show what each source holds; convert nothing")
    ing.set_defaults(run=ic.run)

    pl = _command(sub, common, "pull", help="fetch a slice's packs into the cache, for RAYFORM_OFFLINE=1")
    pl.add_argument("slice", help="the slice: its id (slc_…) or name")
    pl.add_argument("--fps", type=float, help="only the pack at this fps (default: all packs)")
    pl.add_argument("--pack", metavar="KEY", help="only this pack (its key, e.g. fps15-129e34cc, as show lists them)")
    pl.set_defaults(run=c.pull)

    ca = _command(sub, common, "cache", help="where the cache is, how big, which slices it holds whole; prune or clean it")
    ca.set_defaults(run=cc.cache)
    cache_sub = ca.add_subparsers(dest="cache_action", required=False, metavar="ACTION")
    pr = _command(cache_sub, common, "prune", help="evict least-recently-used blobs until the cache fits in a size")
    pr.add_argument("--to", required=True, metavar="SIZE", help="the size to fit in, e.g. 50GB or 200GiB")
    pr.set_defaults(run=cc.cache_prune)
    cl = _command(cache_sub, common, "clean", help="evict a slice's packs from the cache, or everything")
    cl.add_argument("slice", nargs="?", help="the slice whose cached packs go (default: the whole cache)")
    cl.set_defaults(run=cc.cache_clean)

    st = _command(sub, common, "stats", help="a pack's normalization statistics, per array stream and element")
    st.add_argument("slice", help="the slice: its id (slc_…) or name")
    st.add_argument("--fps", type=float, help="the pack's rate (the pack a dataset at that rate reads)")
    st.add_argument("--pack", metavar="KEY", help="this pack (its key, e.g. fps15-129e34cc), instead of --fps")
    st.set_defaults(run=c.stats)

    pv = _command(sub, common, "preview", help="contact sheets, plots and videos of a slice's segments; a Rerun file")
    pv.add_argument("slice", help="the slice: its id (slc_…) or name")
    pv.add_argument("--out", default="preview", metavar="DIR",
                    help="the directory to write into, one folder per segment (default ./preview; -o is the "
                         "storage option, as everywhere)")
    pv.add_argument("--fps", type=float,
                    help="the pack whose action chunks and sample grid are drawn (default: the slice's only rate)")
    pv.add_argument("--pack", metavar="KEY", help="draw this pack's chunks and grid (its key), instead of --fps")
    pv.add_argument("--segments", type=_whole(1), default=4, help="how many segments, the first ones (default 4)")
    pv.add_argument("--segment", action="append", default=[], metavar="ID",
                    help="this segment (repeatable; instead of --segments)")
    pv.add_argument("--no-video", action="store_true", help="no MP4s (the slowest part)")
    pv.add_argument("--rerun", metavar="FILE", help="also write a Rerun recording (.rrd) of those segments")
    pv.set_defaults(run=c.preview)

    dr = _command(sub, common, "doctor", help="the episodes a health signal flags (frozen camera, spike, constant "
                  "stream, dropped frames, odd length, …); exit 1 when any is")
    dr.add_argument("slice", nargs="?", help="a slice's id or name (default: every segment, or --site's)")
    dr.add_argument("--site", help="only this site's segments")
    dr.add_argument("--threshold", action="append", default=[], metavar="SIGNAL=VALUE",
                    help="flag a signal from this value, e.g. --threshold spike=20 (repeatable; default: the ingest's, "
                         "docs/design.md)")
    dr.add_argument("--site-thresholds", metavar="FILE",
                    help="a JSON object {site: {signal: value}}: each site's own thresholds, over --threshold's")
    dr.add_argument("--workers", type=_whole(1),
                    help="processes measuring segments ingested before health signals (default: all cores past 50 "
                         "segments, else 1)")
    dr.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    dr.set_defaults(run=dc.run)

    vw = _command(sub, common, "view", help="browse the store in a web browser: sites, segments, episodes, packs")
    vw.add_argument("--port", type=_whole(0, 65535), default=0, help="the port to listen on (default 0: a free one, printed)")
    vw.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on (default 127.0.0.1: this machine only; the pages are read-only)")
    vw.set_defaults(run=c.view)

    pu = _command(sub, common, "push", help="copy a slice, its segments and packs to another store (resumable)")
    pu.add_argument("slice", help="the slice: its id (slc_…) or name")
    pu.add_argument("dest", help="the store to copy to, e.g. s3://bucket/prefix or a directory")
    pu.add_argument("--fps", type=float, help="only the pack at this fps (default: all packs)")
    pu.add_argument("--pack", metavar="KEY", help="only this pack (its key, e.g. fps15-129e34cc)")
    pu.add_argument("--dest-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a storage option of the destination, e.g. --dest-option endpoint_url=http://host:9000 "
                         "(repeatable; -o sets the source's)")
    pu.set_defaults(run=c.push)

    g = _command(sub, common, "gc", help="delete blobs no ref reaches (a dry run unless --delete)")
    g.add_argument("--delete", action="store_true", help="delete them (default: only say what would go)")
    g.add_argument("--grace", default="1h", metavar="DURATION",
                   help="keep blobs written this recently, e.g. 1h, 30m, 0 (default 1h: a running ingest "
                        "or pack writes blobs before the ref that reaches them)")
    g.add_argument("--force", action="store_true",
                   help="delete with a grace under 10m (only when nothing writes to the store meanwhile)")
    g.set_defaults(run=c.gc)

    v = _command(sub, common, "verify", help="re-hash every blob of a slice and its packs")
    v.add_argument("slice", help="the slice: its id (slc_…) or name")
    v.add_argument("--fps", type=float, help="only the packs at this fps")
    v.add_argument("--pack", metavar="KEY", help="only this pack (its key, e.g. fps15-129e34cc)")
    v.add_argument("--decode", action="store_true",
                   help="also decode every video (recorded, and the packs' clips): finds a recording damaged "
                        "before it was stored, which hashes cannot")
    v.set_defaults(run=c.verify)
    return p
