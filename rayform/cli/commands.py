"""What each ``rayform`` subcommand does. Results go to stdout, progress to stderr."""

from __future__ import annotations

import argparse
import itertools
import json
import os
from typing import Any

from rayform.cli.show import stream_kind
from rayform.cli.words import dtype_in_words, plural
from rayform.client import Client
from rayform.codec.codecs import VIDEO_CODECS
from rayform.errors import InvalidInput, NotFound, PackNotFound, StoreError
from rayform.ops.references import pack_closure, slice_closure
from rayform.ops.verify import verify as verify_blobs
from rayform.pack import Pack, PackSpec
from rayform.pack.stats import stream_of
from rayform.recordings.slices import Slice
from rayform.sizes import format_size, parse_size


def store_client(args: argparse.Namespace, writes: bool = False) -> Client:
    """The client of the store the command names. A command that only reads refuses a local
    store that does not exist (a mistyped path would read as an empty store, and exit 0),
    unless it is the built-in default, which is empty until the first write."""
    client = Client(args.store, storage_options=storage_options(args.option), cache=args.cache)
    named = args.store is not None or bool(os.environ.get("RAYFORM_STORE"))
    if not writes and named and client.store.missing:
        raise StoreError(f"store {client.store.display}: no such directory. Check the path (--store, "
                         "RAYFORM_STORE); a store is made by its first write (rayform demo, rayform ingest)")
    return client


def storage_options(pairs: list[str]) -> dict[str, Any]:
    """``-o key=value`` pairs as fsspec storage options (a value that reads as JSON is that:
    numbers, true/false, null; anything else is a string)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"-o {pair[:60]!r}: write a storage option as key=value, e.g. -o endpoint_url=http://host:9000")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def demo(args: argparse.Namespace) -> int:
    from rayform.converters.demo import DemoConfig, ingest_demo

    client = store_client(args, writes=True)
    config = DemoConfig(episodes=args.episodes, seconds=args.seconds, seed=args.seed)
    refs = ingest_demo(client, args.site, config, progress=not args.quiet)
    slice_ = client.slices.create(refs, name=args.site)
    print(f"{plural(len(refs), 'demo segment')} at site {args.site!r} in {client.store.display}; "
          f"the slice {args.site!r} is", flush=True)
    print(slice_.id)
    return 0


def slices_create(args: argparse.Namespace) -> int:
    client = store_client(args, writes=True)
    slice_ = client.slices.create(args.segment, site=args.site or None, name=args.name, where=args.where)
    print(slice_.id)
    return 0


def slices_ls(args: argparse.Namespace) -> int:
    client = store_client(args)
    slices = client.slices.list()
    if args.json:
        print(json.dumps([{"id": s.id, "name": s.name, "segments": len(s.segments), "sites": s.sites,
                           "digest": s.digest} for s in slices]))
        return 0
    if client.store.offline:
        print(f"offline: the slices the cache {client.store.cache_root} holds of {client.store.display}")
    if slices:
        print(f"{'slice':14}  {'segments':>8}  {'sites':20}  name")
    for s in slices:
        print(f"{s.id:14}  {len(s.segments):8d}  {', '.join(s.sites):20}  {s.name or ''}".rstrip())
    if not slices:
        print("no slices (make one with: rayform slices create --site SITE, or rayform demo)")
    return 0


def slices_split(args: argparse.Namespace) -> int:
    shares: dict[str, float] = {}
    for item in args.shares:
        name, sep, share = item.partition("=")
        try:
            shares[name] = float(share)
        except ValueError:
            sep = ""
        if not sep:
            raise InvalidInput(f"split {item!r}: write each split as NAME=SHARE, e.g. train=0.9 val=0.1")
    children = store_client(args, writes=True).slices.split(args.slice, shares, seed=args.seed)
    for name, child in children.items():
        print(f"{name:8} {child.id}  {plural(len(child.segments), 'segment')}  {child.name}")
    return 0


def show(args: argparse.Namespace) -> int:
    from rayform.cli.show import show as show_id

    return show_id(args, store_client(args))


def slices_show(args: argparse.Namespace) -> int:
    client = store_client(args)
    s = client.slices.get(args.slice)
    print(f"slice {s.id}  name: {s.name or '-'}  manifest: {s.digest[:16]}")
    print(f"segments ({len(s.segments)}):")
    for seg in s.segments:
        rng = "" if seg.start_ns is None and seg.end_ns is None else f"  [{seg.start_ns}, {seg.end_ns}]"
        print(f"  {seg.id}@{seg.version[:12]}  {seg.site}{rng}")
    first = s.segment(0)
    print(f"streams (of {first.id}):")
    for name, info in sorted(first.streams.items()):
        print(f"  {name:24} {stream_kind(info):28} {dtype_in_words(info.dtype):20} {plural(info.count, 'value'):>14}")
    packs = client.packs.list(s)
    print(f"packs ({len(packs)}):")
    for p in packs:
        size = sum(sh.bytes for sh in p.shards)
        print(f"  {p.key}  {p.samples} samples in {len(p.shards)} shards ({format_size(size)}), "
              f"horizon {p.spec.max_horizon}, images {p.spec.image_codec}, dropped {p.dropped['instants']}")
    return 0


def _parse_resize(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InvalidInput(f"resize {text!r}: write it as HxW, e.g. 224x224") from None
    return h, w


def pack(args: argparse.Namespace) -> int:
    from rayform.packer.driver import pack_slice

    client = store_client(args, writes=True)
    s = client.slices.get(args.slice)
    if args.quality is not None and args.codec != "jpeg":
        raise InvalidInput(f"--quality {args.quality}: a JPEG quality, which re-encodes every camera as JPEG: give it "
                           f"with --codec jpeg (--codec {args.codec} keeps recorded JPEGs untouched"
                           + ("; for video, --crf or --psnr" if args.codec in (*VIDEO_CODECS, "keep") else "")
                           + ")")
    spec = PackSpec(
        fps=args.fps,
        streams=tuple(x.strip() for x in args.streams.split(",")) if args.streams else None,
        image_codec=args.codec,
        jpeg_quality=90 if args.quality is None else args.quality,
        jpeg_reencode=args.quality is not None,
        clip_frames=args.clip_frames or 0,  # 0: chosen (64 with --history)
        gop_frames=args.gop,
        video_crf=args.crf,
        video_preset=args.preset,
        video_psnr=args.psnr,
        resize=_parse_resize(args.resize),
        max_horizon=args.horizon,
        max_history=args.history,
        shard_bytes=parse_size(args.shard_size),
        staleness=args.staleness,
        snap=args.snap,
        interleave_seed=None if args.time_order else args.interleave_seed,
    )
    existing = None
    if not args.force:
        try:
            existing = client.packs.get(s, spec)
        except NotFound:
            pass
    p = existing or pack_slice(s, spec, workers=args.workers, progress=not args.quiet, force=args.force)
    size = sum(sh.bytes for sh in p.shards)
    if existing is not None:
        print(f"pack {p.key} of {s.id} exists already (these parameters were packed before; --force packs again)")
    print(f"pack {p.key} of {s.id}: {p.samples} samples at {p.fps} fps in {plural(len(p.shards), 'shard')} "
          f"({format_size(size)})")
    dropped = ", ".join(f"{k} {v}" for k, v in p.dropped["by_stream"].items() if v)
    print(f"dropped {p.dropped['instants']} of {p.instants} instants as stale" + (f" ({dropped})" if dropped else ""))
    for name, schema in p.schema.items():
        v = schema.video
        if v is not None:  # how each camera is held, and why it was encoded where packets were to be kept
            held = f"its recorded {v.codec} packets kept" if v.kept else f"encoded as {v.codec} crf {v.crf}" + (
                f", PSNR {v.psnr:.1f} dB (JPEG q90: {v.jpeg_psnr:.1f})" if v.psnr is not None else "")
            print(f"camera {name}: {held}" + (f" (its packets not kept: {v.why})" if v.why else ""))
    chosen = client.packs.find(s, p.fps, any_size=True)
    print(f"a dataset at {p.fps:g} fps reads " + ("this pack" if chosen.key == p.key else
          f"pack {chosen.key} (full size, then newest: rayform show {s.id}); this one with pack={p.key!r}"))
    for sh in p.shards:
        print(f"  {sh.sha256}  {sh.samples:6d} samples  {format_size(sh.bytes)}")
    return 0


def stats(args: argparse.Namespace) -> int:
    import numpy as np

    client = store_client(args)
    if args.pack is None and args.fps is None:
        raise InvalidInput("stats: name the pack with --fps N (the one a dataset at N fps reads) or --pack KEY")
    chosen = client.slices.get(args.slice)
    pack = client.packs.named(chosen, args.pack) if args.pack else client.packs.find(chosen, args.fps, any_size=True)
    if pack.stats is None:
        raise InvalidInput(f"{pack.slice_id}: its pack {pack.key} was made before packs kept statistics. "
                           f"Run: rayform pack {pack.slice_id} --fps {pack.fps:g} --force")
    print(f"{pack.slice_id} at {pack.fps:g} fps ({pack.spec.key()}), {pack.samples} samples")
    for name, s in pack.stats.items():
        base = pack.schema.get(stream_of(name))
        labels = list(base.names) if base is not None and base.names and len(base.names) == s.mean.size else \
            [str(i) for i in range(s.mean.size)]
        print(f"{name}  {tuple(s.mean.shape)}  count {s.count}")
        print(f"  {'element':14} {'mean':>10} {'std':>10} {'min':>10} {'max':>10} {'q01':>10} {'q99':>10}")
        columns = [np.ravel(v) for v in (s.mean, s.std, s.min, s.max, s.q01, s.q99)]
        for i, label in enumerate(labels):
            print(f"  {label[:14]:14} " + " ".join(f"{c[i]:10.4g}" for c in columns))
    return 0


def verify(args: argparse.Namespace) -> int:
    client = store_client(args)
    s = client.slices.get(args.slice)
    packs = chosen_packs(client, s, args.fps, args.pack, "verify")
    blobs = itertools.chain(slice_closure(s), (r for p in packs for r in pack_closure(p)))
    report = verify_blobs(client.store, blobs, progress=not args.quiet)
    for problem in report.problems:
        print(f"BAD  {problem}")
    state = "ok" if report.ok else f"{len(report.problems)} bad" + (
        ", stopped there: what follows was not checked (mend these first)"
        if report.stopped else "")
    print(f"{s.id}: {plural(report.blobs, 'blob')}, {format_size(report.bytes)} re-hashed: {state}")
    if not args.decode:
        return 0 if report.ok else 1
    from rayform.ops.decode_check import decode_check

    decoded = decode_check(s, packs, progress=not args.quiet) if report.ok else None
    if decoded is None:
        print(f"{s.id}: not decoded: mend the blobs above first")
        return 1
    for problem in decoded.problems:
        print(f"BAD  {problem.what}: {problem.error}")
    state = "ok" if decoded.ok else f"{len(decoded.problems)} damaged"
    print(f"{s.id}: {plural(decoded.blobs, 'video')} decoded: {state}")
    return 0 if decoded.ok else 1


def chosen_packs(client: Client, s: Slice, fps: float | None, key: str | None, doing: str) -> list[Pack]:
    """The slice's packs a command works on: the one ``--pack`` names, those at ``--fps``, or all."""
    if key is not None:
        return [client.packs.named(s, key)]
    packs = [p for p in client.packs.list(s) if fps is None or float(p.fps) == float(fps)]
    if fps is not None and not packs:
        raise PackNotFound(f"{s.id}: no pack at {fps:g} fps to {doing}. Its packs: "
                           f"{', '.join(p.key for p in client.packs.list(s)) or 'none'}")
    return packs


def pull(args: argparse.Namespace) -> int:
    from rayform.ops.pull import pull as pull_slice

    client = store_client(args)
    report = pull_slice(client, args.slice, args.fps, progress=not args.quiet, pack=args.pack)
    packs = ", ".join(p.key for p in report.packs)
    if report.local:
        print(f"{report.slice_id}: the store {client.store.display} is local; nothing to fetch ({packs})")
        return 0
    print(f"{report.slice_id}: fetched {report.fetched} blobs ({format_size(report.bytes)}), "
          f"{report.present} already cached, into {client.store.cache.root if client.store.cache else '?'} ({packs})")
    return 0


def preview(args: argparse.Namespace) -> int:
    from rayform.preview import preview as write_preview

    s = store_client(args).slices.get(args.slice)
    files = write_preview(s, args.out, fps=args.fps, segments=args.segment or args.segments, video=not args.no_video,
                          rerun=args.rerun, pack=args.pack)
    for path in files:
        print(path)
    return 0


def view(args: argparse.Namespace) -> int:
    """Serve the store's pages on loopback until Ctrl-C."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise InvalidInput('rayform view needs the view extra: pip install "rayform[view]"') from None
    from rayform.view.server import serve

    client = store_client(args)

    def ready(url: str) -> None:
        print(f"rayform view: {client.store.display} at {url} (Ctrl-C stops it)", flush=True)

    serve(client, args.host, args.port, ready)
    # the server runs until a signal stops it (aiohttp answers it and returns): a Ctrl-C, as any command's
    raise KeyboardInterrupt


def push(args: argparse.Namespace) -> int:
    from rayform.ops.push import push as push_slice

    source = store_client(args)
    dest = Client(args.dest, storage_options=storage_options(args.dest_option), cache=args.cache)
    report = push_slice(source, args.slice, dest, args.fps, progress=not args.quiet, pack=args.pack)
    packs = ", ".join(p.key for p in report.packs) or "no packs"
    print(f"{report.slice_id} -> {report.dest}: copied {report.copied} blobs ({format_size(report.bytes)}), "
          f"{report.present} already there ({packs})")
    for key in report.kept:
        print(f"kept the destination's own pack {key} (made apart from this one); push it after removing that "
              "ref if you want this one")
    return 0


_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``1h``, ``2d`` in seconds."""
    value = text.strip().lower()
    unit = value[-1:] if value[-1:].isalpha() else ""
    try:
        number = float(value[: len(value) - len(unit)])
        if unit not in _DURATION_UNITS or number < 0 or number != number:
            raise ValueError
    except ValueError:
        raise InvalidInput(f"duration {text[:40]!r}: write it as a number and s, m, h or d, e.g. 1h or 30m") from None
    return number * _DURATION_UNITS[unit]


def gc(args: argparse.Namespace) -> int:
    from rayform.ops.gc import collect

    client = store_client(args)
    grace = parse_duration(args.grace)
    report = collect(client, delete=args.delete, grace_s=grace, force=args.force)
    done = "deleted" if report.deleted else "would delete"
    young = f" and {report.young} written in the last {args.grace} or of unknown age" if grace > 0 or report.young else ""
    print(f"{client.store.display}: {done} {plural(len(report.garbage), 'unreachable blob')} "
          f"({format_size(report.garbage_bytes)}); kept {report.reachable} reachable{young}")
    if not report.deleted and report.garbage:
        print("a dry run: run again with --delete to delete them")
    return 0
