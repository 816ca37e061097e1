"""A Rerun recording (``.rrd``) of a slice's segments, for users who live in Rerun.

Per segment, under ``/<segment id>/``: camera frames as encoded images (the recorded bytes,
no re-encode), array streams as scalar series named by their elements, poses as 3D
transforms (and their position as series), and the pack's sample grid as points at every
sample instant, on one timeline ``time`` (the recorded timestamps). rerun-sdk is an extra:
``pip install 'rayform[rerun]'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rayform.codec import imagecodec
from rayform.errors import InvalidInput
from rayform.preview.packed import PackedSamples
from rayform.recordings.segment_reader import Segment
from rayform.recordings.slices import Slice

TIMELINE = "time"
MEDIA_TYPES = {"jpeg": "image/jpeg", "png": "image/png"}


def write_rrd(slice_: Slice, segments: list[Segment], path: Path, packed: Mapping[str, PackedSamples] | None = None
              ) -> Path:
    """Write ``segments`` of ``slice_`` to ``path``, with the sample grid of each segment's
    ``packed`` samples (``PackedSamples.by_segment``) where given."""
    try:
        import rerun as rr
    except ImportError:
        raise InvalidInput("--rerun needs rerun-sdk: pip install 'rayform[rerun]'") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = rr.RecordingStream("rayform", recording_id=f"{slice_.id}")
    rec.save(path)
    for seg in segments:
        base = seg.id
        for name, info in sorted(seg.streams.items()):
            ts = seg.timestamps(name)
            index = [rr.TimeColumn(TIMELINE, timestamp=ts.astype("datetime64[ns]"))]
            entity = f"{base}/{name}"
            if info.is_image:
                _send_images(rr, rec, seg, name, entity, index)
                continue
            values = seg.values(name).reshape(info.count, -1).astype(np.float64)
            if info.kind == "pose":
                rec.send_columns(entity, index, rr.Transform3D.columns(translation=values[:, :3],
                                                                       quaternion=values[:, 3:7]))
                values, labels = values[:, :3], ["x", "y", "z"]
                entity += "/position"
            else:
                labels = list(info.names) if info.names and len(info.names) == values.shape[1] else \
                    [str(i) for i in range(values.shape[1])]
            rec.log(entity, rr.SeriesLines(names=labels), static=True)
            rec.send_columns(entity, index, rr.Scalars.columns(scalars=values))
        samples = (packed or {}).get(seg.id)
        if samples is not None and len(samples.t_ns):
            entity = f"{base}/pack_{samples.fps:g}fps/samples"
            rec.log(entity, rr.SeriesPoints(names=["sample"], marker_sizes=[3.0]), static=True)
            rec.send_columns(entity, [rr.TimeColumn(TIMELINE, timestamp=samples.t_ns.astype("datetime64[ns]"))],
                             rr.Scalars.columns(scalars=np.arange(len(samples.t_ns), dtype=np.float64)))
    rec.flush()
    rec.disconnect()
    return path


def _send_images(rr: Any, rec: Any, seg: Segment, name: str, entity: str, index: list[Any]) -> None:
    info = seg.streams[name]
    if info.encoding in MEDIA_TYPES or info.encoding == imagecodec.MIXED:
        blobs = [seg.frame_bytes(name, i) for i in range(info.count)]
        rec.send_columns(entity, index, rr.EncodedImage.columns(
            blob=blobs, media_type=[MEDIA_TYPES[imagecodec.frame_encoding(b, str(info.encoding))] for b in blobs]))
        return
    for i, t in enumerate(seg.timestamps(name)):  # raw frames (depth, …): one image each
        rec.set_time(TIMELINE, timestamp=np.datetime64(int(t), "ns"))
        rec.log(entity, rr.Image(seg.frame_array(name, i)))
