"""``rayform show ID``: what a slice or a segment holds, in words a person reads.

Per segment and stream: kind, count, rate (the median over its timestamps, and how much
the periods wander: the 5th–95th percentile spread as a share of the median), duration,
shape, element type in words, units, names, pose frame. A slice adds its packs: fps,
samples, bytes, what alignment dropped.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from rayform.cli.words import dtype_in_words, plural
from rayform.client import Client
from rayform.pack import Pack
from rayform.recordings.segments import Segment
from rayform.recordings.streams import StreamInfo
from rayform.sizes import format_size


def rate_of(ts: np.ndarray) -> tuple[float, float] | None:
    """The median rate in Hz and the 5th–95th percentile spread of the periods, as a percentage
    of the median (half of it either side); None for fewer than two stamps or none apart."""
    if len(ts) < 2:
        return None
    periods = np.diff(ts).astype(np.float64)
    median = float(np.median(periods))
    if median <= 0:
        return None
    lo, hi = np.percentile(periods, [5, 95])
    return 1e9 / median, float(100 * (hi - lo) / (2 * median))


def rate(ts: np.ndarray) -> str:
    """``30.0 Hz ±0.4%``: the median rate, and the 5th–95th percentile spread of the periods."""
    found = rate_of(ts)
    if found is None:
        return "one value" if len(ts) < 2 else "stamps not increasing"
    return f"{found[0]:.3g} Hz ±{found[1]:.1f}%"


def stream_kind(info: StreamInfo) -> str:
    """``image 224×224×3, jpeg``, ``pose (ros axes)``, ``array 8``."""
    what = "×".join(map(str, info.shape)) or "scalar"
    return {"image": f"image {what}, {info.encoding or 'raw'}", "pose": f"pose ({info.frame or 'ros'} axes)"}.get(
        info.kind, f"array {what}")


def stream_line(name: str, info: StreamInfo, ts: np.ndarray) -> str:
    kind = stream_kind(info)
    seconds = (int(ts[-1]) - int(ts[0])) / 1e9 if len(ts) else 0.0
    extra = [x for x in (info.units and f"in {info.units}",
                         info.names and f"names {', '.join(info.names[:6])}{' …' if len(info.names) > 6 else ''}") if x]
    return (f"    {name:24} {kind:28} {dtype_in_words(info.dtype):20} {info.count:7d} values  {rate(ts):16} "
            f"{seconds:7.1f} s" + (f"  {'; '.join(extra)}" if extra else ""))


def segment_lines(seg: Segment) -> list[str]:
    task = f"  task: {seg.task}" if seg.task else ""
    out = [f"  {seg.id}@{seg.version[:12]}  site {seg.site}  {seg.name}{task}"]
    for name in sorted(seg.streams):
        out.append(stream_line(name, seg.streams[name], seg.timestamps(name)))
    return out


def segment_json(seg: Segment) -> dict[str, Any]:
    streams = {}
    for name, info in sorted(seg.streams.items()):
        ts = seg.timestamps(name)
        found = rate_of(ts)
        streams[name] = {"kind": info.kind, "shape": list(info.shape), "dtype": np.dtype(info.dtype).name,
                         "encoding": info.encoding, "count": info.count,
                         "rate_hz": found[0] if found else None, "jitter_percent": found[1] if found else None,
                         "seconds": (int(ts[-1]) - int(ts[0])) / 1e9, "units": info.units,
                         "names": list(info.names) if info.names else None, "frame": info.frame}
    return {"id": seg.id, "version": seg.version, "site": seg.site, "name": seg.name, "task": seg.task,
            "streams": streams}


def pack_json(p: Pack) -> dict[str, Any]:
    return {"key": p.key, "fps": p.fps, "samples": p.samples, "shards": len(p.shards),
            "bytes": sum(sh.bytes for sh in p.shards), "horizon": p.spec.max_horizon, "history": p.spec.max_history,
            "interleaved": p.spec.interleave_seed is not None, "stats": p.stats is not None,
            "dropped": p.dropped["instants"], "instants": p.instants, "digest": p.digest}


def show_json(args: argparse.Namespace, client: Client) -> int:
    if args.id.startswith("seg_"):
        print(json.dumps(segment_json(client.segments.get(args.id))))
        return 0
    s = client.slices.get(args.id)
    print(json.dumps({"id": s.id, "name": s.name, "digest": s.digest, "sites": s.sites,
                      "segments": [segment_json(s.segment(i)) for i in range(min(len(s.segments), args.segments))],
                      "segments_total": len(s.segments), "packs": [pack_json(p) for p in client.packs.list(s)]}))
    return 0


def show(args: argparse.Namespace, client: Client) -> int:
    if args.json:
        return show_json(args, client)
    if args.id.startswith("seg_"):
        print("\n".join(segment_lines(client.segments.get(args.id))))
        return 0
    s = client.slices.get(args.id)
    print(f"slice {s.id}  name: {s.name or '-'}  {plural(len(s.segments), 'segment')}  sites: {', '.join(s.sites)}")
    for i in range(min(len(s.segments), args.segments)):
        print("\n".join(segment_lines(s.segment(i))))
    if len(s.segments) > args.segments:
        print(f"  … and {plural(len(s.segments) - args.segments, 'more segment')} (--segments N shows more)")
    packs = client.packs.list(s)
    print(f"packs ({len(packs)}):" if packs else f"no packs. Make one: rayform pack {s.id} --fps 15")
    for p in packs:
        size = sum(sh.bytes for sh in p.shards)
        dropped = ", ".join(f"{k} {v}" for k, v in p.dropped["by_stream"].items() if v) or "none"
        print(f"  {p.key}  {p.fps:g} fps  {p.samples} samples  {len(p.shards)} shards  {format_size(size)}  "
              f"horizon {p.spec.max_horizon}  history {p.spec.max_history}  "
              f"{'interleaved' if p.spec.interleave_seed is not None else 'time order'}  "
              f"{'stats' if p.stats is not None else 'no stats'}  dropped {p.dropped['instants']} of "
              f"{p.instants} instants ({dropped})")
    return 0
