"""Episodes with a planted defect of each kind the health signals know (``tests/ops``), and a
store's catalog as it was before health signals (rows without them)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

import rayform
from rayform.codec import imagecodec
from rayform.recordings.streams import ImageStream

KINDS = ["frozen", "blank", "dropped", "gap", "duplicate_time", "constant", "spike", "pose_jump", "missing_stream",
         "duration"]


def plant(kind: str, streams: list) -> tuple[list, float]:
    """The streams with a defect of ``kind``; and the time (s from the stream's start) it is at."""
    by = {s.name: s for s in streams}
    cam, joints, pose = by["cam0/rgb"], by["joints/position"], by["ee/pose"]
    t_cam = np.asarray(cam.timestamps)
    if kind == "frozen":
        frames = list(cam.frames)
        frames[20:70] = [frames[20]] * 50
        new = dataclasses.replace(cam, frames=frames)
        at = (t_cam[20] - t_cam[0]) / 1e9
    elif kind == "blank":
        frames = list(cam.frames)
        black = imagecodec.encode_jpeg(np.zeros((32, 32, 3), np.uint8), 90)
        frames[40:43] = [black] * 3
        new = dataclasses.replace(cam, frames=frames)
        at = (t_cam[40] - t_cam[0]) / 1e9
    elif kind in ("dropped", "gap"):
        keep = np.ones(len(t_cam), bool)
        keep[30:60] = False  # a second of frames gone
        new = dataclasses.replace(cam, timestamps=t_cam[keep], frames=[f for f, k in zip(cam.frames, keep) if k])
        at = (t_cam[29] - t_cam[0]) / 1e9
    elif kind == "duplicate_time":
        t = np.asarray(joints.timestamps).copy()
        t[101] = t[100]
        new = dataclasses.replace(joints, timestamps=t)
        at = (t[100] - t[0]) / 1e9
    elif kind == "constant":
        values = np.asarray(joints.values).copy()
        values[:, 3] = values[0, 3]
        new = dataclasses.replace(joints, values=values)
        at = 0.0
    elif kind == "spike":
        values = np.asarray(joints.values).copy()
        values[150:155, 2] = 1e6
        new = dataclasses.replace(joints, values=values)
        at = (joints.timestamps[150] - joints.timestamps[0]) / 1e9
    elif kind == "pose_jump":
        values = np.asarray(pose.values).copy()
        values[120:, :3] += 5.0
        new = dataclasses.replace(pose, values=values)
        at = (pose.timestamps[119] - pose.timestamps[0]) / 1e9
    elif kind == "missing_stream":
        return [s for s in streams if s.name != "wrist/rgb"], 0.0
    elif kind == "duration":
        cut = lambda s: dataclasses.replace(s, timestamps=np.asarray(s.timestamps)[:len(s.timestamps) // 6],
                                            **{("frames" if isinstance(s, ImageStream) else "values"):
                                               (s.frames if isinstance(s, ImageStream) else s.values)[
                                                   :len(s.timestamps) // 6]})
        return [cut(s) for s in streams], 0.0
    else:
        raise AssertionError(kind)
    return [new if s.name == new.name else s for s in streams], at


KINDS = ["frozen", "blank", "dropped", "gap", "duplicate_time", "constant", "spike", "pose_jump", "missing_stream",
         "duration"]


def without_health(client: rayform.Client) -> None:
    """Rewrite each catalog part of a local store without the health columns: rows as a store
    ingested before health signals has them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rayform.recordings.catalog_parts import COLUMNS, OPTIONAL, ref_key

    root = Path(client.store.root)
    for part in client.segments.catalog.parts.live():
        table = pq.read_table(pa.BufferReader(client.store.get_blob(part.part, "part")))
        data = pa.BufferOutputStream()
        pq.write_table(table.select([c for c in COLUMNS if c not in OPTIONAL]), data)
        digest = client.store.put_blob(data.getvalue().to_pybytes())
        doc = json.loads(Path(root / ref_key(part.site, part.key)).read_text())
        Path(root / ref_key(part.site, part.key)).write_text(json.dumps({**doc, "part": digest}))
