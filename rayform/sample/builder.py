"""Building the training sample from a raw shard sample: the one place both datasets share.
Samples are built a batch at a time (``SampleBuilder.fill``), one alone as a batch of one.

A raw sample is ``{member: bytes}`` as the tar holds it. The built sample (numpy; the torch
datasets wrap the arrays without copying) is:

==================  ================  ========  ===============================================
key                 shape             dtype     meaning
==================  ================  ========  ===============================================
each image in obs   ``(C, H, W)``     uint8     channels first (a view of the decoded image)
each array in obs   as recorded       float32   poses in the requested ``frame``
``action``          ``(horizon, J)``  float32   ``x_delta``: x(t+(k+1)/fps) − x(t); else x(t+(k+1)/fps);
                                                several parts concatenated, poses as asked
                                                (``rayform.sample.action``)
``action_is_pad``   ``(horizon,)``    bool      the window ran past the segment's end
``t_ns``            ``()``            int64     sample time
``meta``            dict                        slice, segment, segment_version, site (str);
                                                task (str: the segment's task or instruction),
                                                episode_index (int: the segment's position in
                                                the slice), frame_index (int: the grid step in
                                                the segment)
==================  ================  ========  ===============================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rayform.codec import records
from rayform.codec.video import load_av
from rayform.errors import InvalidInput, Malformed, StreamNotFound
from rayform.frames import convert_poses
from rayform.pack.layout import CLIPS, LOWDIM, META_KEYS, StreamSchema, history_member
from rayform.pack.manifest import Pack
from rayform.sample.action import ActionPart
from rayform.sample.clip_frames import DecodedClips, clip_item
from rayform.sample.clip_records import ClipRecords, clip_meta
from rayform.sample.history import PAD
from rayform.sample.images import chw, decode_image
from rayform.sample.lowdim import RecordArrays
from rayform.sample.normalize import Normalizer
from rayform.sample.spec import SampleSpec
from rayform.untrusted import parsing

_NO_PAD = {"dtype": "|b1", "shape": [0], "data": b""}  # a record from before history masks
_INT64 = (-(1 << 63), 1 << 63)


class SampleBuilder:
    """Validates a :class:`SampleSpec` against a pack once, then builds samples fast: a batch
    at a time (:meth:`fill`), each value written into the batch's arrays."""

    def __init__(self, pack: Pack, spec: SampleSpec, episodes: Mapping[str, int] | None = None):
        self.pack = pack
        # a segment's position in the slice, for packs whose records predate "episode"
        self.episodes = dict(episodes or {})
        self.normalizer: Normalizer | None = None  # set by a dataset given normalize=
        self.spec = spec
        schema = pack.schema
        for name in spec.obs:
            self._stream(schema, name)
        self.images = [schema[n] for n in spec.obs if schema[n].kind == "image"]
        self._image_keys = {s.name for s in self.images}
        self.arrays = [schema[n] for n in spec.obs if schema[n].kind != "image"]
        self.actions = [ActionPart.of(schema, a) for a in spec.actions()]
        self.history = spec.steps_back()
        deepest = max((max(k) for k in self.history.values()), default=0)
        beyond = pack.spec.beyond(deepest, spec.horizon if self.actions else 0)
        if beyond is not None:
            raise InvalidInput(f"{pack.slice_id}: {beyond[0]} at {pack.fps:g} fps. "
                               f"Run: rayform pack {pack.slice_id} --fps {pack.fps:g} {beyond[1]}")
        self._check_keys()
        self.meta_keys = META_KEYS
        self.entries = RecordArrays()
        # the streams whose future window a sample reads (obs arrays, action parts), once each
        self._futures = list(dict.fromkeys([s.name for s in self.arrays] + [p.stream.name for p in self.actions]))
        self._pasts = [s.name for s in self.arrays if s.name in self.history]
        self._pads = list(dict.fromkeys(p.stream.name for p in self.actions))
        self.clips = DecodedClips()  # a video pack's decoded frames (made in each process that reads)
        self.clip_records = ClipRecords(pack) if pack.has_video else None
        if pack.has_video:  # imported where the dataset is made: workers forked from there decode at once
            load_av()  # (else each imports PyAV, ~40 ms, before its first batch of every first epoch)
        self.whole_clips = False  # the streaming dataset decodes whole clips: its order reads them through

    def _check_keys(self) -> None:
        """Two arrays of a sample under one key (a recorded ``x_is_pad`` beside the history mask
        of ``x``): refused, naming both and the fix, rather than one silently taking the other's place."""
        made: dict[str, str] = {}
        for key, _, _ in self.layout():
            what = (f"the history mask of {key.removesuffix(PAD)!r}" if key.endswith(PAD) and key.removesuffix(PAD)
                    in self.history else f"stream {key!r}" if key in self.spec.obs else f"the sample's own {key!r}")
            if key in made:
                raise InvalidInput(f"{self.pack.slice_id}: {made[key]} and {what} are both a sample's key {key!r}; "
                                   f"ask no history of {key.removesuffix(PAD)!r}, or rename the stream at ingest "
                                   "(--map SOURCE=NEW_NAME)")
            made[key] = what

    def read_in_lanes(self, lanes: int) -> None:
        """The order reads a video pack's clips in ``lanes`` lanes at once, each in time order
        (``order.lanes``): decode whole groups of pictures, and keep room for each lane's frames
        (its group, and the frames before it its samples look back on) in one process."""
        self.whole_clips = True
        per_lane = 0
        for s in self.images:
            if s.video is not None:
                height, width = self.spec.resize or s.shape[:2]
                shown = self.pack.spec.group_frames(max(self.history.get(s.name, (0,)))) + 1
                per_lane += (shown + self.pack.spec.max_history) * height * width * 3  # a group's lead-in too
        self.clips.hold(lanes * per_lane)
        if self.clip_records is not None:  # a lane reads a clip's record for each of its samples
            self.clip_records.kept = max(ClipRecords.KEPT, 2 * lanes)

    def _stream(self, schema: Mapping[str, StreamSchema], name: str) -> StreamSchema:
        if name not in schema:
            raise StreamNotFound(
                f"{self.pack.slice_id}: no stream {name!r} in its pack at {self.pack.fps:g} fps. "
                f"It has: {', '.join(sorted(schema))}"
            )
        return schema[name]

    @property
    def action_names(self) -> list[str]:
        """The action's elements, e.g. ``joints/position_delta[shoulder]`` (empty without one)."""
        return [n for part in self.actions for n in part.names(self.spec.rotation)]

    def _action_shape(self) -> tuple[int, ...]:
        if len(self.actions) == 1 and self.actions[0].stream.kind != "pose":
            return tuple(self.actions[0].stream.shape)
        return (sum(part.width(self.spec.rotation) for part in self.actions),)

    @property
    def members(self) -> list[str]:
        """The tar members a sample needs."""
        return [history_member(s.member, k) for s in self.images if s.video is None
                for k in self.history.get(s.name, (0,))] + [CLIPS if self.pack.has_video else LOWDIM]

    def image_shape(self, s: StreamSchema) -> tuple[int, ...]:
        """An image stream's ``(H, W[, C])`` as samples hold it: as packed, or resized."""
        size = self.spec.resize
        return tuple(s.shape) if size is None else (*size, *s.shape[2:])

    def layout(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """Every array a sample holds, as ``(key, shape, dtype)``; images (H, W[, C])."""
        out = [(s.name, self._stacked(s.name, self.image_shape(s)), np.dtype(s.dtype)) for s in self.images]
        out += [(s.name, self._stacked(s.name, s.shape), np.dtype(np.float32)) for s in self.arrays]
        out += [(name + PAD, (len(k),), np.dtype(bool)) for name, k in self.history.items()]
        if self.actions:
            h = self.spec.horizon
            out += [("action", (h, *self._action_shape()), np.dtype(np.float32)),
                    ("action_is_pad", (h,), np.dtype(bool))]
        out.append(("t_ns", (), np.dtype(np.int64)))
        return out

    def rows(self, n: int) -> dict[str, np.ndarray]:
        """Fresh arrays for ``n`` samples: key -> ``(n, *shape)`` as :meth:`layout` says."""
        return {key: np.empty((n, *shape), dtype) for key, shape, dtype in self.layout()}

    def sample(self, rows: Mapping[str, np.ndarray], j: int, meta: dict[str, Any]) -> dict[str, Any]:
        """Sample ``j`` of ``rows`` (filled by :meth:`fill`) as a dict of views of its rows:
        images channels first."""
        out: dict[str, Any] = {}
        for key, values in rows.items():
            if key in self._image_keys:
                out[key] = chw(values[j], key in self.history)
            else:  # values[j] of a (n,) array is a scalar copy; a 0-d view stays in the rows
                out[key] = values[j] if values.ndim > 1 else values[j : j + 1].reshape(())
        out["meta"] = meta
        return out

    def build(self, raw: Mapping[str, Any], key: str = "?") -> dict[str, Any]:
        """One sample dict (numpy, in arrays of its own) from ``{member: bytes-like}``."""
        rows = self.rows(1)
        return self.sample(rows, 0, self.fill([raw], [key], rows)[0])

    def fill(self, raws: Sequence[Mapping[str, Any]], keys: Sequence[str], rows: Mapping[str, np.ndarray],
             at: Sequence[int] | None = None) -> list[dict[str, Any]]:
        """Build samples ``raws`` (``{member: bytes-like}``, named ``keys``) into rows ``at``
        (default ``0 … n−1``) of ``rows`` (key -> an array of :meth:`layout`'s shapes with a
        leading batch axis, as :meth:`rows` makes); returns each sample's ``meta``.

        Images are decoded straight into their rows, one after the other; each record is
        parsed and its entries checked, then the arrays of all ``n`` are computed together."""
        n = len(raws)
        at = list(range(n)) if at is None else list(at)
        whats = [f"sample {key} of {self.pack.slice_id}" for key in keys]
        for s in self.images:
            if s.video is None:
                self._decode(s, raws, whats, rows[s.name], at)
        if self.clip_records is not None:
            return self._fill_from_clips(raws, whats, rows, at)
        entries: dict[tuple[str, str], list[Any]] = {}
        metas, stamps = [], []
        for raw, what in zip(raws, whats):
            with parsing(what):
                low = records.loads(raw[LOWDIM], what)
                arrays = low["arrays"]
                for name in self._futures:
                    entries.setdefault((name, "future"), []).append(arrays[name]["future"])
                for name in self._pasts:
                    entries.setdefault((name, "past"), []).append(arrays[name].get("past"))
                for name in self._pads:
                    entries.setdefault((name, "pad"), []).append(arrays[name]["pad"])
                if self.history:
                    entries.setdefault(("", "history_pad"), []).append(low.get("history_pad", _NO_PAD))
                metas.append(self._meta(low, what))
                t_ns = low["t_ns"]
                if type(t_ns) is not int or not _INT64[0] <= t_ns < _INT64[1]:
                    raise Malformed(f"{what}: t_ns is not a 64-bit integer")
                stamps.append(t_ns)
        values = self._values(lambda name, part, shape: self.entries.column(entries[(name, part)], shape, whats, name,
                                                                              part), len(whats))
        return self._finish(values, stamps, rows, at, metas)

    def _finish(self, values: dict[str, np.ndarray], stamps: list[int], rows: Mapping[str, np.ndarray],
                at: list[int], metas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        values["t_ns"] = np.array(stamps, np.int64)
        if self.normalizer is not None:
            self.normalizer.apply(values)
        for key, v in values.items():
            rows[key][at] = v
        return metas

    def _fill_from_clips(self, raws: Sequence[Mapping[str, Any]], whats: list[str], rows: Mapping[str, np.ndarray],
                         at: list[int]) -> list[dict[str, Any]]:
        """``fill`` for a video pack: records and frames out of each sample's clip."""
        assert self.clip_records is not None
        items = self.clip_records.of(raws, whats)
        for s in self.images:
            if s.video is not None:
                back = self.history.get(s.name, (0,))
                self.clips.fill(s, [clip_item(raw["__clip__"][:2] if "__clip__" in raw else id(raw), rec.video[s.name],
                                              rec.samples, rec.frames[s.name], j, back, rows[s.name][k],
                                              _clip_what(rec, j, what))
                                    for raw, (rec, j), what, k in zip(raws, items, whats, at)],
                                self.spec.resize, self.whole_clips)
        columns = self.clip_records.columns(items)

        def column(name: str, part: str, shape: tuple[int, ...]) -> np.ndarray:
            found = columns[(name, part)]
            assert found.shape[1:] == shape, (name, part, found.shape, shape)  # ClipRecord checked the rows
            return found

        metas, stamps = [], []
        for rec, j in items:
            meta, t_ns = clip_meta(rec, j)
            metas.append(meta)
            stamps.append(t_ns)
        return self._finish(self._values(column, len(whats)), stamps, rows, at, metas)

    def _decode(self, s: StreamSchema, raws: Sequence[Mapping[str, Any]], whats: Sequence[str], rows: np.ndarray,
                at: Sequence[int]) -> None:
        resize = self.spec.resize
        back = self.history.get(s.name)
        for raw, what, j in zip(raws, whats, at):
            with parsing(what):
                if back is None:
                    decode_image(raw[s.member], s.format, rows[j], s.shape, f"{what}, {s.name}", resize)
                    continue
                for i, k in enumerate(back):
                    decode_image(raw[history_member(s.member, k)], s.format, rows[j][i], s.shape,
                                 f"{what}, {s.name} {k} steps back", resize)

    def _meta(self, low: Mapping[str, Any], what: str) -> dict[str, Any]:
        meta = {k: low[k] for k in self.meta_keys}
        meta["task"] = low.get("task", "")
        if not all(isinstance(v, str) for v in meta.values()):
            raise Malformed(f"{what}: meta values are not strings")
        episode, frame = low.get("episode", self.episodes.get(meta["segment"], -1)), low["index"]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (episode, frame)):
            raise Malformed(f"{what}: episode {str(episode)[:20]} and frame {str(frame)[:20]} are not integers")
        meta["episode_index"], meta["frame_index"] = episode, frame
        return meta

    def _values(self, column: Callable[[str, str, tuple[int, ...]], np.ndarray], n: int) -> dict[str, np.ndarray]:
        """Every array but the images, for all ``n`` samples at once (float32 and bool arrays of
        their own), from ``column(stream, field, shape)``: the records' entries as ``(n, *shape)``."""
        spec, schema = self.pack.spec, self.pack.schema
        future = {name: self._in_frame(schema[name], column(name, "future", (spec.max_horizon + 1, *schema[name].shape)))
                  for name in self._futures}
        out: dict[str, np.ndarray] = {}
        for s in self.arrays:
            now = future[s.name][:, 0]
            if s.name in self.history:
                past = column(s.name, "past", (spec.max_history, *s.shape))
                past = self._in_frame(s, past)
                now = np.stack([past[:, k - 1] if k else now for k in self.history[s.name]], axis=1)
            out[s.name] = np.array(now, np.float32)
        if self.history:
            pad = column("", "history_pad", (spec.max_history,))
            for name, back in self.history.items():
                out[name + PAD] = np.stack([pad[:, k - 1].astype(bool) if k else np.zeros(n, bool)
                                            for k in back], axis=1)
        if self.actions:
            h = self.spec.horizon
            parts = [part.values(future[part.stream.name][:, : h + 1], h, self.spec.rotation) for part in self.actions]
            out["action"] = np.array(parts[0] if len(parts) == 1 else
                                     np.concatenate([p.reshape(n, h, -1) for p in parts], axis=-1), np.float32)
            is_pad = np.zeros((n, h), bool)
            for name in self._pads:
                pads = column(name, "pad", (spec.max_horizon + 1,))
                is_pad |= pads[:, 1 : h + 1].astype(bool)
            out["action_is_pad"] = is_pad
        return out

    def _stacked(self, name: str, shape: Sequence[int]) -> tuple[int, ...]:
        back = self.history.get(name)
        return (len(back), *shape) if back else tuple(shape)

    def _in_frame(self, s: StreamSchema, values: np.ndarray) -> np.ndarray:
        if s.kind == "pose" and self.spec.frame is not None:
            return convert_poses(values.astype(np.float64), s.frame or "ros", self.spec.frame)
        return values


def _clip_what(rec: Any, j: int, what: str) -> str:
    """Where a clip's sample comes from, for a decoder's error: its segment and grid step."""
    r = rec.record
    return (f"{what} (segment {r.get('segment')}@{str(r.get('segment_version'))[:12]}, frame_index "
            f"{int(rec.rows[j]) + r['rows_from']})")
