"""Storing a segment: its streams checked and written as blobs, then its manifest, whose hash
is the version. Nothing here makes a segment visible: that is its ref (``segments``).

A segment's id is derived from its site and name, so re-ingesting the same recording finds
the same segment; a change in any byte makes a new version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rayform import config, names
from rayform.cache.store_view import CachedStore
from rayform.codec import imagecodec, records
from rayform.codec.clip import MAX_SIDE
from rayform.codec.codecs import VIDEO_CODECS
from rayform.errors import InvalidInput
from rayform.frames import FRAMES
from rayform.recordings import health
from rayform.recordings.catalog_parts import CatalogRow, catalog_row
from rayform.recordings.streams import (
    ArrayStream,
    ImageStream,
    PoseStream,
    Stream,
    StreamInfo,
    VideoInfo,
    VideoStream,
    check_stream_name,
    check_timestamps,
)
from rayform.store.bundle import BUNDLE_BYTES, BundleWriter

SEGMENT_FORMAT = "rayform.segment/1"
IMAGE_CHUNK_BYTES = 16 << 20  # frames (and video packets) are stored in blobs of about this size
# segments whose array health is measured together (``_measure``): a batch's numpy calls cost
# what one episode's do, which is what weighs on short episodes; at most this many segments, or
# their arrays this many bytes (long episodes gain nothing from company, and hold memory)
HEALTH_BATCH = 64
HEALTH_BATCH_BYTES = 4 << 20


def check_site(site: str) -> str:
    return names.site(site)


def segment_id(site: str, name: str) -> str:
    return "seg_" + hashlib.sha256(f"{site}\0{name}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SegmentRef:
    """What ``segments.add`` returns: a segment id and the version that was stored (and, from
    the writer, the row its site's catalog gets when it is recorded)."""

    id: str
    version: str
    site: str
    name: str
    row: CatalogRow | None = field(default=None, compare=False, repr=False)


@dataclass
class _Unmeasured:
    """A stored segment waiting for its health: where its ref is in the writer's pending ones,
    its streams' findings so far, its array streams and every stream's timestamps."""

    at: int
    findings: list[health.Finding]
    arrays: list[tuple[str, np.ndarray, np.ndarray]]
    stamps: dict[str, np.ndarray]


class SegmentWriter:
    """Writes segments' blobs and manifests into one store: the small ones (manifests,
    timestamps, arrays) collected into bundles (``store.bundle``), the large ones (frame
    chunks, video packets) as blobs of their own. ``finish`` writes the last bundle and
    returns every segment stored, each with its catalog row."""

    def __init__(self, store: CachedStore, bundle_bytes: int = BUNDLE_BYTES):
        self.store = store
        self.sink = BundleWriter(store, bundle_bytes=bundle_bytes)
        self._pending: list[SegmentRef] = []  # stored since the last bundle was written
        self._unmeasured: list[_Unmeasured] = []  # pending segments whose health is not yet in their row
        self._unmeasured_bytes = 0  # their array streams' bytes
        self._done: list[SegmentRef] = []

    def finish(self) -> list[SegmentRef]:
        """Write what is collected; every segment ``put`` stored, with its catalog row."""
        self._flush()
        done, self._done = self._done, []
        return done

    def _flush(self) -> None:
        self._measure()
        holds = [self.sink.holds(ref.version) for ref in self._pending]
        bundle = self.sink.flush()
        for ref, held in zip(self._pending, holds):
            assert ref.row is not None
            self._done.append(dataclasses.replace(ref, row=dataclasses.replace(ref.row, bundle=bundle if held else None)))
        self._pending = []

    def _measure(self) -> None:
        """The health of the segments stored since the last batch: their array streams measured
        together (``health.arrays_of_episodes``), each summary in its segment's catalog row."""
        waiting, self._unmeasured, self._unmeasured_bytes = self._unmeasured, [], 0
        if not waiting:
            return
        arrays = health.arrays_of_episodes([w.arrays for w in waiting])
        for w, found in zip(waiting, arrays):
            ref = self._pending[w.at]
            assert ref.row is not None
            summary = health.summary(w.findings + found + health.spans(w.stamps))
            self._pending[w.at] = dataclasses.replace(ref, row=dataclasses.replace(ref.row, health=summary))

    def put(self, site: str, name: str, streams: Sequence[Stream], meta: Mapping[str, Any] | None = None,
            allow_nonfinite: bool = False) -> SegmentRef:
        """Check and store one segment's data and manifest (not yet visible: ``Segments.record``).
        Its health is measured with a batch of segments: the rows ``finish`` returns carry it."""
        check_site(site)
        if not isinstance(name, str) or not name or len(name) > 1024:
            raise InvalidInput(f"segment name {str(name)[:80]!r}: a non-empty string of at most 1024 characters")
        if not streams:
            raise InvalidInput(f"segment {site}/{name}: no streams")
        sid = segment_id(site, name)
        entries: dict[str, Any] = {}
        timed: dict[str, tuple[StreamInfo, np.ndarray]] = {}
        measuring = config.measure_health()
        findings: list[health.Finding] = []
        arrays: list[tuple[str, np.ndarray, np.ndarray]] = []  # measured together, after the loop
        clocks: set[bytes] = set()  # timestamps whose timing is measured (streams often share one clock)
        for stream in streams:
            check_stream_name(stream.name)
            if stream.name in entries:
                raise InvalidInput(f"segment {site}/{name}: stream {stream.name!r} given twice")
            try:
                info, ts = self._put_stream(stream, allow_nonfinite)
            except InvalidInput as e:  # which segment, for a source of many
                raise type(e)(f"segment {site}/{name}: {e}") from None
            entries[stream.name] = info.to_manifest()
            timed[stream.name] = (info, ts)
            if measuring:
                findings += _health(stream, info, ts, arrays, clocks)
        meta = dict(meta or {})
        manifest = {
            "format": SEGMENT_FORMAT,
            "id": sid,
            "site": site,
            "name": name,
            "meta": meta,
            "streams": entries,
        }
        version = self.sink.put_json_blob(manifest)
        row = catalog_row(sid, name, site, version, None, time.time_ns(), meta, timed)
        ref = SegmentRef(sid, version, site, name, row)
        self._pending.append(ref)
        if measuring:
            stamps = {n: ts for n, (_, ts) in timed.items()}
            self._unmeasured.append(_Unmeasured(len(self._pending) - 1, findings, arrays, stamps))
            self._unmeasured_bytes += sum(values.nbytes for _, _, values in arrays)
            if len(self._unmeasured) >= HEALTH_BATCH or self._unmeasured_bytes >= HEALTH_BATCH_BYTES:
                self._measure()
        if self.sink.full:
            self._flush()
        return ref

    def _put_stream(self, stream: Stream, allow_nonfinite: bool = False) -> tuple[StreamInfo, np.ndarray]:
        """A stream's data stored; its entry in the manifest, and its timestamps."""
        if isinstance(stream, ImageStream):
            return self._put_images(stream)
        if isinstance(stream, VideoStream):
            return self._put_video(stream)
        if isinstance(stream, (ArrayStream, PoseStream)):
            return self._put_array(stream, allow_nonfinite)
        raise InvalidInput(f"{str(stream)[:80]}: not an ImageStream, VideoStream, ArrayStream or PoseStream")

    def _put_array(self, stream: ArrayStream | PoseStream, allow_nonfinite: bool = False) -> tuple[StreamInfo, np.ndarray]:
        values = np.asarray(stream.values)
        if values.dtype.kind not in "biuf":
            raise InvalidInput(f"stream {stream.name}: dtype {values.dtype} is not numeric or bool")
        if values.ndim == 0:
            raise InvalidInput(f"stream {stream.name}: values must be (N, ...), got a scalar")
        ts = check_timestamps(stream.name, stream.timestamps, len(values))
        if values.dtype.kind == "f" and not allow_nonfinite and isinstance(stream, ArrayStream):
            check_finite(stream.name, values, ts)
        frame = names = None
        kind = "array"
        if isinstance(stream, PoseStream):
            kind = "pose"
            frame = stream.frame
            if frame not in FRAMES:
                raise InvalidInput(f"stream {stream.name}: frame {frame!r} is not one of {FRAMES}")
            if values.shape[1:] != (7,):
                raise InvalidInput(f"stream {stream.name}: poses are (N, 7) x,y,z,qx,qy,qz,qw; got {values.shape}")
            values = values.astype(np.float64)
            if not np.all(np.isfinite(values)):
                bad = int(np.flatnonzero(~np.isfinite(values).all(axis=1))[0])
                raise InvalidInput(f"stream {stream.name}: pose {bad} is not finite ({values[bad].tolist()})")
            norms = np.linalg.norm(values[:, 3:], axis=1)
            off = ~(np.abs(norms - 1) < 1e-3)
            if off.any():
                bad = int(np.flatnonzero(off)[0])
                raise InvalidInput(f"stream {stream.name}: quaternion {bad} has norm {norms[bad]:.4f}, not 1")
        elif stream.names is not None:
            names = tuple(stream.names)
            if values.ndim != 2 or values.shape[1] != len(names):
                raise InvalidInput(f"stream {stream.name}: {len(names)} names for values of shape {values.shape}")
        meta = dict(stream.meta)
        if isinstance(stream, ArrayStream) and stream.limits is not None:
            meta["limits"] = [b.tolist() for b in _limits(stream, values)]
        return StreamInfo(
            name=stream.name,
            kind=kind,
            count=len(values),
            dtype=values.dtype.str,
            shape=tuple(values.shape[1:]),
            timestamps=self.sink.put_blob(records.to_npy(ts)),
            data=((self.sink.put_blob(records.to_npy(values)), len(values)),),
            units=stream.units,
            names=names,
            frame=frame,
            meta=meta,
        ), ts

    def _put_images(self, stream: ImageStream) -> tuple[StreamInfo, np.ndarray]:
        frames = stream.frames
        ts = check_timestamps(stream.name, stream.timestamps, len(frames))
        if isinstance(frames, np.ndarray):
            if frames.ndim not in (3, 4) or frames.dtype.kind not in "uf":
                raise InvalidInput(
                    f"stream {stream.name}: raw frames must be (N, H, W[, C]) unsigned or float, "
                    f"got {frames.shape} {frames.dtype}"
                )
            per_chunk = max(1, IMAGE_CHUNK_BYTES // max(1, frames[0].nbytes))
            chunks = tuple(
                (self.sink.put_blob(records.to_npy(frames[i : i + per_chunk])), len(frames[i : i + per_chunk]))
                for i in range(0, len(frames), per_chunk)
            )
            return StreamInfo(
                name=stream.name, kind="image", count=len(frames), dtype=frames.dtype.str,
                shape=tuple(frames.shape[1:]), timestamps=self.sink.put_blob(records.to_npy(ts)),
                data=chunks, encoding="raw", meta=dict(stream.meta),
            ), ts
        encoding = _common_encoding(stream.name, frames)
        first = imagecodec.decode(frames[0], imagecodec.sniff(frames[0]), what=f"stream {stream.name} frame 0")
        _check_frame_sizes(stream.name, frames, encoding, first.shape[:2])
        return StreamInfo(
            name=stream.name, kind="image", count=len(frames), dtype=first.dtype.str,
            shape=tuple(first.shape), timestamps=self.sink.put_blob(records.to_npy(ts)),
            data=tuple(self._put_frame_chunks(frames)), encoding=encoding,
            sizes=self.sink.put_blob(records.to_npy(np.array([len(f) for f in frames], np.int64))),
            meta=dict(stream.meta),
        ), ts

    def _put_video(self, stream: VideoStream) -> tuple[StreamInfo, np.ndarray]:
        """Packets kept as recorded, in chunked blobs; their times and keyframe flags in one index
        blob; the frames' times as the stream's timestamps (each one packet's)."""
        name = stream.name
        packets = list(stream.packets)
        times = check_timestamps(name, stream.timestamps, len(np.asarray(stream.timestamps)))
        if stream.codec not in VIDEO_CODECS:
            raise InvalidInput(f"stream {name}: video codec {stream.codec!r} is not one of {', '.join(VIDEO_CODECS)}")
        for side, value in (("width", stream.width), ("height", stream.height)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIDE:
                raise InvalidInput(f"stream {name}: video {side} {value!r} is not in 1..{MAX_SIDE}")
        pts = np.asarray(stream.packet_times)
        keys = np.asarray(stream.keyframes, bool)
        if pts.dtype.kind not in "iu" or pts.shape != (len(packets),) or keys.shape != (len(packets),):
            raise InvalidInput(f"stream {name}: {len(packets)} packets, {pts.size} packet times and {keys.size} "
                               "keyframe flags: give one of each per packet (int64 ns, bool)")
        if not packets or not keys[0]:
            raise InvalidInput(f"stream {name}: the first packet is not a keyframe: the video would not decode from it")
        if not all(isinstance(pk, (bytes, memoryview)) and len(pk) for pk in packets):
            raise InvalidInput(f"stream {name}: a packet is empty or not bytes")
        if np.any(np.diff(times) <= 0):
            raise InvalidInput(f"stream {name}: two frames share a time; a video's frames have one each")
        shown = np.sort(pts[(pts >= times[0]) & (pts <= times[-1])])
        if not np.array_equal(shown, times):
            raise InvalidInput(f"stream {name}: {len(times)} frames, but the packets from the first frame's time to "
                               f"the last's are {len(shown)} with other times; each frame is one packet's time")
        if len(stream.extradata) > 1 << 16:
            raise InvalidInput(f"stream {name}: codec extradata of {len(stream.extradata)} bytes (at most 64 KiB)")
        index = np.stack([pts.astype(np.int64), keys.astype(np.int64)], axis=1)
        video = VideoInfo(stream.codec, len(packets), self.sink.put_blob(records.to_npy(index)), bytes(stream.extradata),
                          bool(np.any(np.diff(pts) < 0)))
        return StreamInfo(
            name=name, kind="image", count=len(times), dtype="|u1", shape=(stream.height, stream.width, 3),
            timestamps=self.sink.put_blob(records.to_npy(times)), data=tuple(self._put_frame_chunks(packets)),
            encoding="video", sizes=self.sink.put_blob(records.to_npy(np.array([len(pk) for pk in packets], np.int64))),
            meta=dict(stream.meta), video=video,
        ), times

    def _put_frame_chunks(self, frames: Sequence[bytes | memoryview]) -> Iterable[tuple[str, int]]:
        buf: list[bytes] = []
        size = 0
        for f in frames:
            buf.append(bytes(f))
            size += len(f)
            if size >= IMAGE_CHUNK_BYTES:
                yield self.sink.put_blob(b"".join(buf)), len(buf)
                buf, size = [], 0
        if buf:
            yield self.sink.put_blob(b"".join(buf)), len(buf)


def check_finite(name: str, values: np.ndarray, t_ns: np.ndarray) -> None:
    """Refuse a NaN or an infinity, naming the stream's first row that holds one."""
    finite = np.isfinite(values).reshape(len(values), -1).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])
        shown = np.array2string(np.asarray(values[row]).ravel()[:8], precision=4, separator=", ")
        raise InvalidInput(
            f"stream {name}: row {row} (t = {int(t_ns[row])} ns) is not finite {shown}; "
            f"{int((~finite).sum())} of {len(values)} rows are not. Fix the source, or keep them with "
            "allow_nonfinite=True (rayform ingest --allow-nonfinite): statistics then leave them out"
        )


def _health(stream: Stream, info: StreamInfo, ts: np.ndarray, arrays: list[tuple[str, np.ndarray, np.ndarray]],
            clocks: set[bytes]) -> list[health.Finding]:
    """A stream's health signals (``recordings.health``), from what is in hand while it is stored
    (``info``: its manifest entry, the declared limits checked there); an array stream's added to
    ``arrays``, measured with the segment's others; a clock's timing once, named after the first
    stream on it."""
    clock = hashlib.blake2b(ts.tobytes(), digest_size=16).digest()
    found = health.timing(stream.name, ts) if clock not in clocks else []
    clocks.add(clock)
    if isinstance(stream, ImageStream):
        found += health.frames(stream.name, ts, stream.frames)
    elif isinstance(stream, VideoStream):
        found += health.video(stream.name, ts, np.asarray(stream.packet_times, np.int64),
                              np.array([len(p) for p in stream.packets], np.int64), np.asarray(stream.keyframes, bool))
    elif isinstance(stream, PoseStream):
        found += health.arrays(stream.name, ts, np.asarray(stream.values), "pose")
    else:
        values = np.asarray(stream.values)
        arrays.append((stream.name, ts, values))
        if stream.limits is not None:  # checked and spelled out a column each by ``_put_array``
            low, high = info.meta["limits"]
            found += health.out_of_range(stream.name, ts, values, (np.asarray(low), np.asarray(high)))
    return found


def _limits(stream: ArrayStream, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stream's declared limits as one (low, high) a column, checked."""
    width = int(np.prod(values.shape[1:]))
    try:
        limits = health.declared_limits(stream.limits, width)
    except ValueError as e:
        raise InvalidInput(f"stream {stream.name}: limits {str(stream.limits)[:60]}: {e} (give (low, high): "
                           f"numbers, or {width} each)") from None
    assert limits is not None
    return limits


def _check_frame_sizes(name: str, frames: Sequence[bytes], encoding: str, size: tuple[int, ...]) -> None:
    """Every frame of a stream has the first one's height and width (read from its header)."""
    for i, f in enumerate(frames):
        hw = imagecodec.dimensions(f, imagecodec.frame_encoding(f, encoding), what=f"stream {name} frame {i}")
        if hw != tuple(size):
            raise InvalidInput(f"stream {name}: frame {i} is {hw[1]}x{hw[0]}, frame 0 is {size[1]}x{size[0]}; "
                               "a stream's frames share one size")


def _common_encoding(name: str, frames: Sequence[bytes]) -> str:
    """The frames' format, or ``"mixed"`` where a stream holds both (each kept as recorded)."""
    first = imagecodec.sniff(frames[0])
    for i, f in enumerate(frames):
        if bytes(f[:3]) != bytes(frames[0][:3]):
            try:
                imagecodec.sniff(f)
            except InvalidInput:
                raise InvalidInput(f"stream {name}: frame {i} is neither JPEG nor PNG") from None
            return imagecodec.MIXED
    return first
