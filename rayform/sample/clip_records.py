"""A video pack's records: one per clip (``clips.mp``, ``pack.layout``), read as the columns a
batch's samples take from them.

Each clip a batch reads is parsed once, its fields checked against the pack's schema (the
array rows it holds for the grid steps its samples read, every sample's step and frames in
range) before any value is taken from it; sample ``j`` of a clip then reads the rows of its
step: its future, its past and their pad masks, as a JPEG pack's per-sample records hold them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rayform.codec import records
from rayform.errors import Malformed
from rayform.pack.layout import CLIPS, META_KEYS
from rayform.pack.manifest import Pack
from rayform.untrusted import integer, parsing

_MAX_SAMPLES = 4096
_INT64 = (-(1 << 63), 1 << 63)


class ClipRecord:
    """One clip's ``clips.mp``, checked: ``record`` (its fields), ``video`` (camera → clip
    document), ``arrays`` (stream → (values, pad) over its rows), ``history_pad``."""

    def __init__(self, data: Any, pack: Pack, what: str):
        doc = records.loads(data, what)
        if not isinstance(doc, dict) or not isinstance(doc.get("record"), dict) or not isinstance(doc.get("video"), dict):
            raise Malformed(f"{what}: its {CLIPS} is not a clip record and clips")
        rec = doc["record"]
        self.record, self.video = rec, doc["video"]
        spec = pack.spec
        n = self.samples = integer(rec, "samples", f"{what}, its clip", 1, _MAX_SAMPLES)
        rows_from = integer(rec, "rows_from", f"{what}, its clip", _INT64[0], _INT64[1] - 1)
        t_ns, index = rec.get("t_ns"), rec.get("index")
        for name, values in (("t_ns", t_ns), ("index", index)):
            if not isinstance(values, list) or len(values) != n or \
                    not all(type(v) is int and _INT64[0] <= v < _INT64[1] for v in values):
                raise Malformed(f"{what}: its clip's {name} is not {n} 64-bit integers")
        assert isinstance(index, list) and isinstance(t_ns, list)
        self.t_ns, self.rows = t_ns, np.asarray(index, np.int64) - rows_from  # each sample's row
        if len(self.rows) and (self.rows.min() < spec.max_history):
            raise Malformed(f"{what}: a sample's history runs before its clip's rows")
        need = int(self.rows.max()) + spec.max_horizon + 1
        self.arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        arrays = rec.get("arrays")
        if not isinstance(arrays, dict):
            raise Malformed(f"{what}: its clip record has no arrays")
        for name, s in pack.schema.items():
            if s.kind == "image":
                continue
            entry = arrays.get(name)
            if not isinstance(entry, dict):
                raise Malformed(f"{what}: its clip record has no {name}")
            values = records.unpack_array(entry.get("values"), f"{what}, {name}")
            pad = records.unpack_array(entry.get("pad"), f"{what}, {name} pad")
            if values.ndim < 1 or values.shape[1:] != tuple(s.shape) or values.shape[0] < need or \
                    values.dtype.kind not in "biuf" or pad.shape != values.shape[:1] or pad.dtype != bool:
                raise Malformed(f"{what}: its clip's {name} is {values.shape} {values.dtype} (pad {pad.shape}), "
                                f"the pack needs ({need}, {', '.join(map(str, s.shape))}) numbers")
            self.arrays[name] = (values, pad)
        self.history_pad = None
        if spec.max_history:
            hp = records.unpack_array(rec.get("history_pad"), f"{what}, history pad")
            if hp.ndim != 1 or hp.shape[0] < need or hp.dtype != bool:
                raise Malformed(f"{what}: its clip's history pad mask is {hp.shape} {hp.dtype}")
            self.history_pad = hp
        frames = rec.get("frames")
        self.frames: dict[str, np.ndarray] = {}
        for name, s in pack.schema.items():
            if s.video is None:
                continue
            f = records.unpack_array(frames.get(name) if isinstance(frames, dict) else None, f"{what}, {name} frames")
            if f.shape != (n, spec.max_history + 1) or f.dtype.kind not in "iu" or (f.size and f.min() < 0):
                raise Malformed(f"{what}: its clip's {name} frames are {f.shape} {f.dtype}, not ({n}, "
                                f"{spec.max_history + 1}) places in its clip")
            if not isinstance(self.video.get(name), dict):
                raise Malformed(f"{what}: its clips hold no {name}")
            self.frames[name] = f.astype(np.int64)
        if not all(isinstance(rec.get(key), str) for key in META_KEYS) or not isinstance(rec.get("task", ""), str):
            raise Malformed(f"{what}: its clip's {', '.join(META_KEYS)} and task are not strings")
        if type(rec.get("episode", -1)) is not int:
            raise Malformed(f"{what}: its clip's episode is not an integer")


class ClipRecords:
    """The records a batch's samples read, each clip parsed once (a few kept across batches:
    the stream's lanes read a clip over several)."""

    KEPT = 64

    def __init__(self, pack: Pack):
        self.pack = pack
        self.kept = self.KEPT  # records kept: at least one a lane of the order (``SampleBuilder.read_in_lanes``)
        self._kept: dict[Any, ClipRecord] = {}

    def of(self, raws: Sequence[Mapping[str, Any]], whats: Sequence[str]) -> list[tuple[ClipRecord, int]]:
        """Each sample's clip record and its place in it."""
        out = []
        for raw, what in zip(raws, whats):
            where = raw.get("__clip__")
            key = where[:2] if isinstance(where, tuple) else id(raw)
            found = self._kept.get(key)
            if found is None:
                cameras = ", ".join(n for n, sc in self.pack.schema.items() if sc.video is not None)
                named = f"{what} (its {CLIPS}: the clips of {cameras})"  # a truncated record still says whose
                with parsing(named):
                    found = ClipRecord(raw[CLIPS], self.pack, named)
                if len(self._kept) >= self.kept:
                    self._kept.pop(next(iter(self._kept)))
                self._kept[key] = found
            j = where[2] if isinstance(where, tuple) else 0
            if not 0 <= j < found.samples:
                raise Malformed(f"{what}: its place {j} in its clip of {found.samples} samples is not there")
            out.append((found, j))
        return out

    def columns(self, items: Sequence[tuple[ClipRecord, int]]) -> dict[tuple[str, str], np.ndarray]:
        """``(stream, "future" | "pad" | "past")`` and ``("", "history_pad")`` columns of the
        samples, as the builder reads them from a JPEG pack's records."""
        spec = self.pack.spec
        ahead = np.arange(spec.max_horizon + 1)
        back = np.arange(1, spec.max_history + 1)
        out: dict[tuple[str, str], np.ndarray] = {}
        for name in items[0][0].arrays if items else ():
            out[(name, "future")] = np.stack([rec.arrays[name][0][rec.rows[j] + ahead] for rec, j in items])
            out[(name, "pad")] = np.stack([rec.arrays[name][1][rec.rows[j] + ahead] for rec, j in items])
            if spec.max_history:
                out[(name, "past")] = np.stack([rec.arrays[name][0][rec.rows[j] - back] for rec, j in items])
        if spec.max_history:
            out[("", "history_pad")] = np.stack([rec.history_pad[rec.rows[j] - back] for rec, j in items
                                                 if rec.history_pad is not None])
        return out


def clip_meta(rec: ClipRecord, j: int) -> tuple[dict[str, Any], int]:
    """Sample ``j``'s meta (as a JPEG pack's record gives it) and its time."""
    r = rec.record
    meta = {k: r[k] for k in META_KEYS}
    meta["task"] = r.get("task", "")
    meta["episode_index"], meta["frame_index"] = r.get("episode", -1), int(rec.rows[j]) + r["rows_from"]
    return meta, rec.t_ns[j]
