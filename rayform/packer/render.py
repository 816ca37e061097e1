"""Rendering samples: one task's instants of one segment into tar member bytes.

Runs in pool workers, so everything it takes is picklable and it opens the store itself.
A sample is the members of one key::

    <key>.<stream with / as .>.jpg|png|npy   one per image stream
    <key>.lowdim.mp                          t_ns, meta fields (slice, segment, its version,
                                             site, task, its position in the slice, the grid
                                             step in it), and for every array stream
                                             its values at t + j/fps, j = 0..max_horizon,
                                             with the pad mask
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from rayform.codec import imagecodec, records
from rayform.pack.layout import LOWDIM, StreamSchema
from rayform.pack.spec import PackSpec
from rayform.packer import align
from rayform.packer.plan import Task
from rayform.recordings.segments import Segment, Segments
from rayform.store.cached import StoreRef


def member_format(source_encoding: str, dtype: str, spec: PackSpec) -> str:
    """The file format an image stream is packed as."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        return "npy"  # float depth: no image codec keeps it losslessly
    if np.dtype(dtype).itemsize > 1 or spec.image_codec == "png":
        return "png"
    if spec.image_codec == "jpeg":
        return "jpg"
    return {"jpeg": "jpg", "png": "png"}.get(source_encoding, "png")


def sample_key(segment_id: str, version: str, grid_index: int) -> str:
    # No dots: webdataset splits a member name into key and extension at the first dot.
    return f"{segment_id}-{version[:8]}-{grid_index:06d}"


_SEGMENTS: OrderedDict[tuple[str, str], Segment] = OrderedDict()


def _segment(store_ref: StoreRef, version: str, segment_id: str) -> Segment:
    key = (store_ref.url, version)
    if key not in _SEGMENTS:
        _SEGMENTS[key] = Segments(store_ref.open()).get(segment_id, version)
        while len(_SEGMENTS) > 4:
            _SEGMENTS.popitem(last=False)
    return _SEGMENTS[key]


def render_task(
    store_ref: StoreRef,
    segment_id: str,
    slice_id: str,
    spec: PackSpec,
    schema: dict[str, StreamSchema],
    end_ns: int,
    task: Task,
) -> list[tuple[str, dict[str, bytes]]]:
    """The samples of one task, in time order, as ``(key, {member: bytes})``."""
    seg = _segment(store_ref, task.version, segment_id)
    t = task.times
    images: dict[str, list[bytes]] = {}
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, s in schema.items():
        ts = seg.timestamps(name)
        snap = align.snap_ns(ts, spec.snap)
        if s.kind == "image":
            idx = align.latest_at_or_before(ts, t, snap)
            images[s.member] = [_image_member(seg, name, int(i), s, spec) for i in idx]
        else:
            end = min(end_ns, int(ts[-1]))
            arrays[name] = align.future_window(ts, seg.values(name), t, spec.fps, spec.max_horizon, end, s.kind,
                                               snap)
    out = []
    for j in range(len(t)):
        lowdim = {
            "t_ns": int(t[j]),
            "index": int(task.grid_index[j]),
            "episode": task.position,
            "task": seg.task,
            "slice": slice_id,
            "segment": seg.id,
            "segment_version": seg.version,
            "site": seg.site,
            "arrays": {
                name: {"future": records.pack_array(values[j]), "pad": records.pack_array(pad[j])}
                for name, (values, pad) in arrays.items()
            },
        }
        members = {member: frames[j] for member, frames in images.items()}
        members[LOWDIM] = records.dumps(lowdim)
        out.append((sample_key(seg.id, seg.version, int(task.grid_index[j])), members))
    return out


def _image_member(seg: Segment, name: str, index: int, s: StreamSchema, spec: PackSpec) -> bytes:
    info = seg.streams[name]
    target = {"jpg": "jpeg", "png": "png", "npy": "npy"}[s.format]
    if info.encoding == target and spec.resize is None:
        return seg.frame_bytes(name, index)  # as recorded: not one pixel re-encoded
    image = seg.frame_array(name, index)
    if spec.resize is not None and tuple(image.shape[:2]) != spec.resize:
        image = imagecodec.resize(image, spec.resize)
    if target == "npy":
        return records.to_npy(image)
    return imagecodec.encode(image, target, spec.jpeg_quality)
