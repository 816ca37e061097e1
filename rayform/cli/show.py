"""``rayform show ID``: what a slice or a segment holds, in words a person reads.

Per segment and stream: kind, count, rate (the median over its timestamps, and how much
the periods wander: the 5th–95th percentile spread as a share of the median), duration,
shape, element type in words, units, names, pose frame. A slice adds its packs: fps,
samples, bytes, images (codec and size), order, what alignment dropped, when each was made,
which one a dataset at its rate reads by default, and what sets each apart from the others.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from rayform.cli.words import dtype_in_words, plural
from rayform.client import Client
from rayform.pack import Pack
from rayform.pack.packs import packs_described
from rayform.recordings.segment_reader import Segment
from rayform.recordings.slices import Slice
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
    """``image 224×224×3, jpeg``, ``image 640×360×3, av1``, ``pose (ros axes)``, ``array 8``."""
    what = "×".join(map(str, info.shape)) or "scalar"
    encoding = info.video.codec if info.video is not None else info.encoding or "raw"
    return {"image": f"image {what}, {encoding}", "pose": f"pose ({info.frame or 'ros'} axes)"}.get(
        info.kind, f"array {what}")


def video_words(seg: Segment, name: str) -> str | None:
    """``video: keyframes up to 2 apart, 1.9 KiB a frame`` for a stream kept as recorded video."""
    info = seg.streams[name]
    if info.video is None:
        return None
    gap = seg.video(name).keyframe_gap()
    per_frame = format_size(int(seg.frame_sizes(name).sum()) / max(1, info.count))
    order = ", B-frames" if info.video.reorders else ""
    return f"video: keyframes up to {gap} apart{order}, {per_frame} a frame"


def pack_cameras(p: Pack) -> list[str]:
    """Each video camera of a pack: ``wrist/rgb: av1 as recorded, clips of 8, 1.9 KiB a frame``."""
    out = []
    for name, s in p.schema.items():
        v = s.video
        if v is None:
            continue
        by = f" (chosen for this camera: {v.crf_by})" if v.crf_by and v.crf_by != "given" else ""
        how = f"{v.codec} as recorded" if v.kept else f"{v.codec} crf {v.crf}{by} preset {v.preset}, no B-frames"
        gop = f", GOP {v.gop}" if v.gop is not None else ""
        if p.spec.gop_frames and not v.kept:
            gop += f" (a keyframe every {p.spec.gop_frames} samples, history in the first group)"
        size = f", {format_size(v.packet_bytes / max(1, p.samples))} a frame" if v.packet_bytes is not None else ""
        why = f" (encoded: {v.why})" if v.why else ""
        quality = f", PSNR {v.psnr:.1f} dB (JPEG q90 {v.jpeg_psnr:.1f})" if v.psnr is not None else ""
        out.append(f"{name}: {how}{gop}, clips of {v.clip_frames} samples{size}{quality}{why}")
    return out


def stream_line(name: str, info: StreamInfo, ts: np.ndarray, seg: Segment | None = None) -> str:
    kind = stream_kind(info)
    seconds = (int(ts[-1]) - int(ts[0])) / 1e9 if len(ts) else 0.0
    extra = [x for x in (video_words(seg, name) if seg is not None else None, info.units and f"in {info.units}",
                         info.names and f"names {', '.join(info.names[:6])}{' …' if len(info.names) > 6 else ''}") if x]
    return (f"    {name:24} {kind:28} {dtype_in_words(info.dtype):20} {info.count:7d} values  {rate(ts):16} "
            f"{seconds:7.1f} s" + (f"  {'; '.join(extra)}" if extra else ""))


def segment_lines(seg: Segment) -> list[str]:
    task = f"  task: {seg.task}" if seg.task else ""
    out = [f"  {seg.id}@{seg.version[:12]}  site {seg.site}  {seg.name}{task}"]
    for name in sorted(seg.streams):
        out.append(stream_line(name, seg.streams[name], seg.timestamps(name), seg))
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
                         "names": list(info.names) if info.names else None, "frame": info.frame,
                         "video": {"codec": info.video.codec, "packets": info.video.packets,
                                   "keyframe_gap": seg.video(name).keyframe_gap(),
                                   "bytes": int(seg.frame_sizes(name).sum())} if info.video is not None else None}
    return {"id": seg.id, "version": seg.version, "site": seg.site, "name": seg.name, "task": seg.task,
            "streams": streams}


def pack_json(p: Pack, made: str = "", default: bool = False, apart: list[str] | None = None) -> dict[str, Any]:
    return {"key": p.key, "fps": p.fps, "samples": p.samples, "shards": len(p.shards),
            "bytes": sum(sh.bytes for sh in p.shards), "horizon": p.spec.max_horizon, "history": p.spec.max_history,
            "interleaved": p.spec.interleave_seed is not None, "interleave_seed": p.spec.interleave_seed,
            "codec": p.spec.image_codec, "resize": list(p.spec.resize) if p.spec.resize else None,
            "streams": list(p.spec.streams or ()), "stats": p.stats is not None, "dropped": p.dropped["instants"],
            "instants": p.instants, "digest": p.digest, "made": made or None, "default": default,
            "apart": apart or [],
            "video": {n: s.video.to_manifest() for n, s in p.schema.items() if s.video is not None}}


def show_json(args: argparse.Namespace, client: Client) -> int:
    if args.id.startswith("seg_"):
        print(json.dumps(segment_json(client.segments.get(args.id))))
        return 0
    s = client.slices.get(args.id)
    print(json.dumps({"id": s.id, "name": s.name, "digest": s.digest, "sites": s.sites,
                      "segments": [segment_json(s.segment(i)) for i in range(min(len(s.segments), args.segments))],
                      "segments_total": len(s.segments),
                      "packs": [pack_json(*described) for described in packs_described(client.packs, s)]}))
    return 0


def suggested_fps(s: Slice) -> str:
    """The rate to pack a slice at: its cameras' (the slowest of its first segment's), so a video
    recorded at that rate is kept packet for packet rather than re-encoded; 15 with no camera."""
    seg = s.segment(0)
    rates = [found[0] for name, info in seg.streams.items() if info.is_image
             and (found := rate_of(seg.timestamps(name))) is not None]
    return f"{round(min(rates)):g}" if rates else "15"


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
    packs = packs_described(client.packs, s)
    print(f"packs ({len(packs)}):" if packs else f"no packs. Make one: rayform pack {s.id} --fps {suggested_fps(s)}")
    for p, made, default, differs in packs:
        size = sum(sh.bytes for sh in p.shards)
        dropped = ", ".join(f"{k} {v}" for k, v in p.dropped["by_stream"].items() if v) or "none"
        images = "full size" if p.spec.resize is None else f"resized {p.spec.resize[0]}x{p.spec.resize[1]}"
        order = f"interleave seed {p.spec.interleave_seed}" if p.spec.interleave_seed is not None else "time order"
        print(f"  {p.key}  {p.fps:g} fps  {p.samples} samples  {plural(len(p.shards), 'shard')}  {format_size(size)}  "
              f"images {p.spec.image_codec}, {images}  horizon {p.spec.max_horizon}  history {p.spec.max_history}  "
              f"{order}  {'stats' if p.stats is not None else 'no stats'}  dropped {p.dropped['instants']} of "
              f"{p.instants} instants ({dropped})")
        said = [f"made {made[:19].replace('T', ' ')} UTC" if made else "made before packs said when"]
        if default:
            said.append(f"read by default at {p.fps:g} fps")
        if differs:
            said.append("apart: " + "; ".join(differs))
        print(f"      {', '.join(said)}")
        for line in pack_cameras(p):
            print(f"      {line}")
    return 0
