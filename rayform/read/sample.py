"""Building the training sample from a raw shard sample: the one place both datasets share.

A raw sample is ``{member: bytes}`` as the tar holds it. The built sample (numpy; the torch
datasets wrap the arrays without copying) is:

==================  ================  ========  ===============================================
key                 shape             dtype     meaning
==================  ================  ========  ===============================================
each image in obs   ``(C, H, W)``     uint8     channels first (a view of the decoded image)
each array in obs   as recorded       float32   poses in the requested ``frame``
``action``          ``(horizon, J)``  float32   ``x_delta``: x(t+(k+1)/fps) − x(t); else x(t+(k+1)/fps);
                                                several parts concatenated, poses as asked
                                                (``rayform.read.action``)
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

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from rayform.codec import imagecodec, records
from rayform.errors import InvalidInput, Malformed, StreamNotFound
from rayform.frames import check_frame, convert_poses
from rayform.pack.layout import LOWDIM, META_KEYS, StreamSchema, history_member
from rayform.pack.manifest import Pack
from rayform.pack.spec import MAX_HORIZON, check_fps
from rayform.read.action import DELTA, ActionPart, check_rotation
from rayform.read.history import PAD, steps_back
from rayform.read.normalize import Normalizer
from rayform.untrusted import parsing


@dataclass(frozen=True)
class SampleSpec:
    """What a dataset asks of each sample: the ``obs`` streams, the ``action`` (a stream, a
    ``<stream>_delta``, or several to concatenate: ``rayform.read.action``) ``horizon`` steps
    long, the pack's rate ``fps``, the ``frame`` poses are re-expressed in (None: as
    recorded), and the ``rotation`` a pose action's rotation is given as (``"quat"``,
    ``"rot6d"``, ``"axis_angle"``; None: the recorded quaternion). Checked when made."""

    obs: Sequence[str]  # one name, or several: kept as a tuple
    action: str | Sequence[str] | None = None  # several: kept as a tuple
    fps: float = 15
    horizon: int = 16
    frame: str | None = None
    rotation: str | None = None
    # a stream's past values: a number of steps, or seconds (``rayform.read.history``)
    history: Mapping[str, int | Sequence[float]] | None = None
    # every image decoded at this (H, W) (JPEG through the decoder's DCT scaling); None: as packed
    resize: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        obs = (self.obs,) if isinstance(self.obs, str) else tuple(self.obs)
        if not obs or not all(isinstance(o, str) and o for o in obs):
            raise InvalidInput(f"obs {str(self.obs)[:80]}: name one stream or more, e.g. obs=[\"cam0/rgb\"]")
        if self.action is not None and not isinstance(self.action, str):
            parts = tuple(self.action) if isinstance(self.action, Sequence) else ()
            if not parts or not all(isinstance(a, str) and a for a in parts):
                raise InvalidInput(f"action {str(self.action)[:80]}: a stream name, e.g. \"joints/position_delta\", "
                                   "several to concatenate, or None")
            object.__setattr__(self, "action", parts if len(parts) > 1 else parts[0])
        if self.action == "":
            raise InvalidInput("action '': a stream name, e.g. \"joints/position_delta\", or None")
        check_rotation(self.rotation)
        horizon = self.horizon
        if isinstance(horizon, bool) or not isinstance(horizon, numbers.Integral) or not 1 <= horizon <= MAX_HORIZON:
            raise InvalidInput(f"horizon {horizon!r}: a whole number of steps, 1..{MAX_HORIZON}")
        object.__setattr__(self, "obs", obs)
        object.__setattr__(self, "horizon", int(horizon))
        object.__setattr__(self, "fps", check_fps(self.fps))
        check_frame(self.frame)
        steps = steps_back(self.history, self.fps)
        for name in steps:
            if name not in obs:
                raise InvalidInput(f"history of {name!r}: not in obs ({', '.join(obs)}); history is of observations")
        object.__setattr__(self, "history", steps or None)
        object.__setattr__(self, "resize", check_resize(self.resize))

    def steps_back(self) -> dict[str, tuple[int, ...]]:
        """Each stream's history as steps back, in output order (none: no history)."""
        return dict(self.history or {})  # type: ignore[arg-type]  # normalized in __post_init__

    def actions(self) -> tuple[str, ...]:
        """The parts of the action, as asked (none without one)."""
        if self.action is None:
            return ()
        return (self.action,) if isinstance(self.action, str) else tuple(self.action)

    def streams(self) -> list[str]:
        """The packed streams these samples read."""
        out = list(self.obs) + [a.removesuffix(DELTA) for a in self.actions()]
        return list(dict.fromkeys(out))


_NO_PAD = {"dtype": "|b1", "shape": [0], "data": b""}  # a record from before history masks


def check_resize(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, Sequence) and len(size) == 2 and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and 1 <= int(v) <= 16384 for v in size):
        return int(size[0]), int(size[1])
    raise InvalidInput(f"resize {str(size)[:40]}: (height, width) in pixels, e.g. (224, 224)")


class SampleBuilder:
    """Validates a :class:`SampleSpec` against a pack once, then builds samples fast."""

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
        self.arrays = [schema[n] for n in spec.obs if schema[n].kind != "image"]
        self.actions = [ActionPart.of(schema, a) for a in spec.actions()]
        self.history = spec.steps_back()
        deepest = max((max(k) for k in self.history.values()), default=0)
        if deepest > pack.spec.max_history:
            raise InvalidInput(
                f"{pack.slice_id}: a history {deepest} steps back is beyond its pack's {pack.spec.max_history} at "
                f"{pack.fps:g} fps. Run: rayform pack {pack.slice_id} --fps {pack.fps:g} --history {deepest}"
            )
        if self.actions and spec.horizon > pack.spec.max_horizon:
            raise InvalidInput(
                f"{pack.slice_id}: horizon {spec.horizon} is beyond the pack's maximum "
                f"{pack.spec.max_horizon} at {pack.fps} fps. Run: rayform pack {pack.slice_id} "
                f"--fps {pack.fps:g} --horizon {spec.horizon}"
            )
        self.meta_keys = META_KEYS
        # array entries of this pack's records checked in full once: (stream, field) -> (dtype
        # string, shape list, dtype, bytes) as they were found (``_array``)
        self._seen: dict[tuple[str, str], tuple[str, list[int], np.dtype, int]] = {}

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
        return [history_member(s.member, k) for s in self.images for k in self.history.get(s.name, (0,))] + [LOWDIM]

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

    def build(self, raw: Mapping[str, Any], key: str = "?", into: Mapping[str, np.ndarray] | None = None
              ) -> dict[str, Any]:
        """The sample dict from ``{member: bytes-like}``.

        With ``into`` (key -> a writable array of :meth:`layout`'s shape), every value is
        written into its array (images decoded straight into it), so a batch can be
        filled with no copy after the decode.
        """
        into = into or {}
        what = f"sample {key} of {self.pack.slice_id}"
        with parsing(what):
            low = records.loads(raw[LOWDIM], what)
            arrays = low["arrays"]
            out: dict[str, Any] = {}
            for s in self.images:
                if s.name not in self.history:
                    out[s.name] = _chw(decode_image(raw[s.member], s.format, into.get(s.name), s.shape,
                                                    f"{what}, {s.name}", self.spec.resize))
                    continue
                back = self.history[s.name]
                slot = into.get(s.name)
                frames = slot if slot is not None else np.empty((len(back), *self.image_shape(s)), np.dtype(s.dtype))
                for i, k in enumerate(back):
                    decode_image(raw[history_member(s.member, k)], s.format, frames[i], s.shape,
                                 f"{what}, {s.name} {k} steps back", self.spec.resize)
                out[s.name] = _chw(frames, stacked=True)
            for s in self.arrays:
                now = self._future(arrays, s, what)[0]
                if s.name in self.history:
                    past = self._past(arrays, s, what)
                    now = np.stack([past[k - 1] if k else now for k in self.history[s.name]])
                out[s.name] = _put(into, s.name, self._in_frame(s, now), np.float32)
            if self.history:
                pad = self._array(low.get("history_pad", _NO_PAD), (self.pack.spec.max_history,), what, "",
                                  "history_pad")
                for name, back in self.history.items():
                    out[name + PAD] = _put(into, name + PAD, np.array([bool(k) and bool(pad[k - 1]) for k in back]),
                                           bool)
            if self.actions:
                h = self.spec.horizon
                parts, is_pad = [], np.zeros(h, bool)
                for part in self.actions:
                    s = part.stream
                    future = self._in_frame(s, self._future(arrays, s, what)[: h + 1])
                    parts.append(part.values(future, h, self.spec.rotation))
                    pad = self._array(arrays[s.name]["pad"], (self.pack.spec.max_horizon + 1,), what, s.name, "pad")
                    is_pad |= pad[1 : h + 1].astype(bool)
                action = parts[0] if len(parts) == 1 else np.concatenate([p.reshape(h, -1) for p in parts], axis=-1)
                out["action"] = _put(into, "action", action, np.float32)
                out["action_is_pad"] = _put(into, "action_is_pad", is_pad, bool)
            t_ns = low["t_ns"]
            if isinstance(t_ns, bool) or not isinstance(t_ns, int):
                raise Malformed(f"{what}: t_ns is not an integer")
            out["t_ns"] = _put(into, "t_ns", np.asarray(t_ns, np.int64), np.int64)
            meta = {k: low[k] for k in self.meta_keys}
            meta["task"] = low.get("task", "")
            if not all(isinstance(v, str) for v in meta.values()):
                raise Malformed(f"{what}: meta values are not strings")
            episode, frame = low.get("episode", self.episodes.get(meta["segment"], -1)), low["index"]
            if any(isinstance(v, bool) or not isinstance(v, int) for v in (episode, frame)):
                raise Malformed(f"{what}: episode {str(episode)[:20]} and frame {str(frame)[:20]} are not integers")
            meta["episode_index"], meta["frame_index"] = episode, frame
            out["meta"] = meta
        if self.normalizer is not None:
            self.normalizer.apply(out)
        return out

    def _future(self, arrays: Mapping[str, Any], s: StreamSchema, what: str) -> np.ndarray:
        """A stream's future window, checked against the pack's schema before it is used."""
        return self._array(arrays[s.name]["future"], (self.pack.spec.max_horizon + 1, *s.shape), what, s.name,
                           "future")

    def _stacked(self, name: str, shape: Sequence[int]) -> tuple[int, ...]:
        back = self.history.get(name)
        return (len(back), *shape) if back else tuple(shape)

    def _past(self, arrays: Mapping[str, Any], s: StreamSchema, what: str) -> np.ndarray:
        """A stream's values 1 … max_history steps back, checked against the pack's schema."""
        return self._array(arrays[s.name].get("past"), (self.pack.spec.max_history, *s.shape), what, s.name,
                           "past")

    def _array(self, entry: Any, shape: tuple[int, ...], what: str, stream: str, field: str) -> np.ndarray:
        """A record's array entry (``records.pack_array``): ``stream``'s ``field`` (or the
        record's own, ``stream`` empty), checked to hold ``shape``.

        Every record of a pack describes an array alike: once one entry has been checked in
        full, an entry with the very same dtype string, shape list and byte count is read
        with a few comparisons (the per-sample cost of a record is what a loader pays beside
        the image decode)."""
        key = (stream, field)
        seen = self._seen.get(key)
        if seen is not None and type(entry) is dict:
            dtype_str, shape_list, dtype, nbytes = seen
            data = entry.get("data")
            if type(data) is bytes and len(data) == nbytes and entry.get("dtype") == dtype_str \
                    and entry.get("shape") == shape_list:
                return np.frombuffer(data, dtype).reshape(shape)
        values = records.unpack_array(entry, what)
        if values.shape != shape:
            name = {"future": stream, "pad": f"{stream} pad mask", "past": f"{stream} history",
                    "history_pad": "history pad mask"}[field]
            raise Malformed(f"{what}: {name} is {values.shape}, the pack says {shape}")
        if len(self._seen) < 64:
            self._seen[key] = (entry["dtype"], list(entry["shape"]), values.dtype, values.nbytes)
        return values

    def _in_frame(self, s: StreamSchema, values: np.ndarray) -> np.ndarray:
        if s.kind == "pose" and self.spec.frame is not None:
            return convert_poses(values.astype(np.float64), s.frame or "ros", self.spec.frame)
        return values


def decode_image(data: Any, fmt: str, out: np.ndarray | None = None, shape: tuple[int, ...] | None = None,
                 what: str = "image", resize: tuple[int, int] | None = None) -> np.ndarray:
    """An image member decoded (into ``out`` when given), its header checked against ``shape``
    first: a header that claims another size never gets to allocate. With ``resize`` (H, W),
    decoded at that size (``imagecodec.decode_resized``)."""
    if resize is not None and shape is not None and tuple(resize) != tuple(shape[:2]):
        if fmt in ("jpg", "png"):
            return _into(imagecodec.decode_resized(data, "jpeg" if fmt == "jpg" else "png", resize, shape, what), out)
        return _into(imagecodec.resize(decode_image(data, fmt, None, shape, what), resize), out)
    if fmt == "jpg" and out is not None and shape is not None and out.shape == tuple(shape) \
            and imagecodec.decode_jpeg_into(data, out):
        return out  # else: the checked path below names what is wrong
    if fmt == "npy":
        image = records.from_npy(bytes(data), what)
    elif fmt in ("jpg", "png"):
        image = imagecodec.decode(data, "jpeg" if fmt == "jpg" else "png", shape, what, out)
        if image is out:
            return out
    else:
        raise Malformed(f"image member format {fmt!r}: not jpg, png or npy")
    if shape is not None and image.shape != tuple(shape):
        raise Malformed(f"{what}: decoded as {image.shape}, the pack says {tuple(shape)}")
    return _into(image, out)


def _into(image: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None:
        return image
    np.copyto(out, image.reshape(out.shape))
    return out


def _put(into: Mapping[str, np.ndarray], key: str, value: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    slot = into.get(key)
    if slot is None:
        return np.array(value, dtype=dtype)  # a copy: never a view into the shard's bytes
    np.copyto(slot, value, casting="unsafe")
    return slot


def _chw(image: np.ndarray, stacked: bool = False) -> np.ndarray:
    """Channels first, as a view (the batch copy is where channels move): ``(H, W[, C])`` →
    ``(C, H, W)``; ``stacked``, with a leading time axis: ``(N, H, W[, C])`` → ``(N, C, H, W)``."""
    # transpose and indexing, not moveaxis/expand_dims: these run for every image (~10 µs less each)
    if stacked:
        return image[:, None] if image.ndim == 3 else image.transpose(0, 3, 1, 2)
    return image[None] if image.ndim == 2 else image.transpose(2, 0, 1)
