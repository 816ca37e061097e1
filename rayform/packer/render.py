"""Rendering samples: one task's instants of one segment into tar member bytes.

Runs in pool workers, so everything it takes is picklable and it opens the store itself.
A sample is the members of one key::

    <key>.<stream with / as .>.jpg|png|npy   one per image stream
    <key>.<stream>.h<j>.jpg|png|npy          with max_history: the frame j steps back
    <key>.clips.mp                           a video pack's, instead of lowdim.mp: in the
                                             first sample of each clip, its cameras' clips
                                             and its samples' record (``packer.clips``)
    <key>.lowdim.mp                          t_ns, meta fields (slice, segment, its version,
                                             site, task, its position in the slice, the grid
                                             step in it), and for every array stream
                                             its values at t + j/fps, j = 0..max_horizon,
                                             with the pad mask; with max_history, its values
                                             j grid steps back (``past``) and the mask of the
                                             steps before the segment's first sample
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from rayform.cache.store_view import CachedStore, StoreRef
from rayform.codec import imagecodec, records
from rayform.pack import grid
from rayform.pack.layout import CLIPS, LOWDIM, StreamSchema, history_member
from rayform.pack.spec import PackSpec
from rayform.packer import align
from rayform.packer.clips import frame_indices, render_clip_docs
from rayform.packer.plan import Task
from rayform.packer.tar_writer import Buffer
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segments import Segments


def member_format(source_encoding: str, dtype: str, spec: PackSpec) -> str:
    """The file format an image stream is packed as."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        return "npy"  # float depth: no image codec keeps it losslessly
    if np.dtype(dtype).itemsize > 1 or spec.image_codec == "png":
        return "png"
    if spec.image_codec == "jpeg":
        return "jpg"
    # a stream of JPEG and PNG frames: JPEG, its PNG frames encoded so (each JPEG one kept as recorded)
    return {"jpeg": "jpg", "png": "png", "mixed": "jpg"}.get(source_encoding, "png")


def sample_key(segment_id: str, version: str, grid_index: int) -> str:
    # No dots: webdataset splits a member name into key and extension at the first dot.
    return f"{segment_id}-{version[:8]}-{grid_index:06d}"


_SEGMENTS: OrderedDict[tuple[str, str], Segment] = OrderedDict()


_STORES: dict[StoreRef, CachedStore] = {}


def open_segment(store_ref: StoreRef, version: str, segment_id: str, bundle: str | None = None) -> Segment:
    key = (store_ref.url, version)
    if key not in _SEGMENTS:
        store = _STORES.get(store_ref)
        if store is None:  # opened once per process: a run renders thousands of short segments
            store = _STORES[store_ref] = store_ref.open()
        _SEGMENTS[key] = Segments(store).get(segment_id, version, bundle=bundle)
        while len(_SEGMENTS) > 2:  # each keeps up to segments.BLOBS_KEPT_BYTES
            _SEGMENTS.popitem(last=False)
    return _SEGMENTS[key]


@dataclass(frozen=True)
class Rendered:
    samples: list[tuple[str, dict[str, Buffer]]]  # (key, {member: bytes}), in time order
    arrays: dict[str, tuple[np.ndarray, np.ndarray]]  # per array stream: future values and pad mask
    video_bytes: dict[str, int] = field(default_factory=dict)  # per video camera: its clips' packet bytes


def render_task(
    store_ref: StoreRef,
    segment_id: str,
    slice_id: str,
    spec: PackSpec,
    schema: dict[str, StreamSchema],
    span: tuple[int, int],
    task: Task,
) -> Rendered:
    """The samples of one task, and the arrays their records hold (for the statistics);
    ``span``: the segment's first sample's instant (history stops there) and where future
    windows stop."""
    seg = open_segment(store_ref, task.version, segment_id, task.bundle)
    start_ns, end_ns = span
    t = task.times
    origin = grid.origin(int(t[0]), int(task.grid_index[0]), spec.fps)
    # history: the grid's instants j = 1 … max_history steps back, held at the segment's first sample
    back = spec.history_instants(origin, task.grid_index)
    history_pad = back < start_ns
    back = np.maximum(back, start_ns)
    future = spec.future_instants(origin, task.grid_index)
    images: dict[str, list[Buffer]] = {}
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    past: dict[str, np.ndarray] = {}
    for name, s in schema.items():
        ts = seg.timestamps(name)
        snap = align.snap_ns(ts, spec.snap)
        if s.video is not None:
            continue  # in the clips (below)
        if s.kind == "image":
            for j, idx in enumerate(frame_indices(seg, name, spec, t, back).T):  # now, then each step back
                images[history_member(s.member, j)] = [_image_member(seg, name, int(i), s, spec) for i in idx]
        else:
            end = min(end_ns, int(ts[-1]))
            values = seg.values(name)
            arrays[name] = align.future_window(ts, values, future, end, s.kind, snap)
            if spec.max_history:
                flat = align.interpolate(ts, values, back.reshape(-1), s.kind)
                past[name] = flat.reshape(len(t), spec.max_history, *values.shape[1:])
    base = {"episode": task.position, "task": seg.task, "slice": slice_id, "segment": seg.id,
            "segment_version": seg.version, "site": seg.site}
    if any(s.video is not None for s in schema.values()):
        docs, video_bytes = render_clip_docs(seg, spec, schema, task.grid_index, t, back, span, base)
        images[CLIPS] = [docs[j // spec.clip_frames] if j % spec.clip_frames == 0 else b"" for j in range(len(t))]
        return Rendered([(sample_key(seg.id, seg.version, int(task.grid_index[j])),
                          {member: frames[j] for member, frames in images.items()}) for j in range(len(t))], arrays,
                        video_bytes)
    out: list[tuple[str, dict[str, Buffer]]] = []
    for j in range(len(t)):
        lowdim = {
            "t_ns": int(t[j]),
            "index": int(task.grid_index[j]),
            **base,
            "arrays": {
                name: {"future": records.pack_array(values[j]), "pad": records.pack_array(pad[j]),
                       **({"past": records.pack_array(past[name][j])} if name in past else {})}
                for name, (values, pad) in arrays.items()
            },
        }
        if spec.max_history:
            lowdim["history_pad"] = records.pack_array(history_pad[j])
        members = {member: frames[j] for member, frames in images.items()}
        members[LOWDIM] = records.dumps(lowdim)
        out.append((sample_key(seg.id, seg.version, int(task.grid_index[j])), members))
    return Rendered(out, arrays)


def as_recorded(seg: Segment, name: str, s: StreamSchema, spec: PackSpec) -> bool:
    """Whether the pack keeps this segment's frames of stream ``name`` as recorded."""
    return seg.streams[name].encoding == _ENCODING[s.format] and spec.resize is None and \
        not (spec.jpeg_reencode and s.format == "jpg")


_ENCODING = {"jpg": "jpeg", "png": "png", "npy": "npy"}


def _image_member(seg: Segment, name: str, index: int, s: StreamSchema, spec: PackSpec) -> Buffer:
    if as_recorded(seg, name, s, spec):
        return seg.frame_view(name, index)  # not one pixel re-encoded, not one byte copied
    target = _ENCODING[s.format]
    if seg.streams[name].encoding == imagecodec.MIXED and spec.resize is None and not spec.jpeg_reencode:
        view = seg.frame_view(name, index)
        if imagecodec.sniff(bytes(view[:8])) == target:  # this frame is in the pack's format: as recorded
            return view
    image = seg.frame_array(name, index)
    if spec.resize is not None and tuple(image.shape[:2]) != spec.resize:
        image = imagecodec.resize(image, spec.resize)
    if target == "npy":
        return records.to_npy(image)
    return imagecodec.encode(image, target, spec.jpeg_quality)
