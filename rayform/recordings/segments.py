"""Segments: one continuous recording at one site, immutable per version.

A segment's id is derived from its site and name, so re-ingesting the same recording
finds the same segment. Its version is the sha256 of its manifest: a change in any byte
makes a new version, and old versions stay readable (their blobs are never deleted).
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.codec import imagecodec, records
from rayform.errors import (
    InvalidInput,
    Malformed,
    NotFound,
    RayformError,
    SegmentNotFound,
    StreamNotFound,
)
from rayform.frames import FRAMES
from rayform.recordings.streams import (
    ArrayStream,
    ImageStream,
    PoseStream,
    Stream,
    StreamInfo,
    check_stream_name,
    check_timestamps,
)
from rayform.untrusted import array_list, mapping, string

log = logging.getLogger("rayform")
SEGMENT_FORMAT = "rayform.segment/1"
IMAGE_CHUNK_BYTES = 16 << 20  # frames are stored in blobs of about this size
# What a segment keeps of its blobs once read: every stream's timestamps, values and frame
# sizes and a few frame chunks of each camera, so that rendering a run of its samples reads
# (and hashes) each blob once
BLOBS_KEPT_BYTES = 128 << 20

T = TypeVar("T")


def check_site(site: str) -> str:
    return names.site(site)


def segment_id(site: str, name: str) -> str:
    return "seg_" + hashlib.sha256(f"{site}\0{name}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class SegmentRef:
    """What ``segments.add`` returns: a segment id and the version that was stored."""

    id: str
    version: str
    site: str
    name: str


class Segment:
    """One stored segment version: its manifest, and its stream data read on demand."""

    def __init__(self, store: CachedStore, version: str, manifest: Mapping[str, Any]):
        what = f"segment manifest {version[:16]}"
        mapping(manifest, what)
        self.store = store
        self.version = version
        self.id: str = names.segment_id(manifest.get("id"), f"{what}: id")
        self.site: str = names.site(manifest.get("site"), f"{what}: site", trusted=False)
        self.name: str = string(manifest, "name", what)
        self.meta: dict[str, Any] = dict(mapping(manifest.get("meta", {}), f"{what}: meta"))
        self.streams: dict[str, StreamInfo] = {
            n: StreamInfo.from_manifest(n, s, what) for n, s in mapping(manifest.get("streams"), what).items()
        }
        self._blobs: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._kept_bytes = 0

    def __repr__(self) -> str:
        return f"Segment({self.id}@{self.version[:8]}, site={self.site!r}, name={self.name!r})"

    @property
    def task(self) -> str:
        """The segment's task or language instruction: ``meta["task"]``, else its ``meta["tasks"]``
        joined by "; " (LeRobot's episode tasks), else ""."""
        task = self.meta.get("task")
        if isinstance(task, str):
            return task
        tasks = self.meta.get("tasks")
        if isinstance(tasks, list) and all(isinstance(t, str) for t in tasks):
            return "; ".join(tasks)
        return ""

    def stream(self, name: str) -> StreamInfo:
        try:
            return self.streams[name]
        except KeyError:
            raise StreamNotFound(
                f"{self.id}: no stream {name!r}. It has: {', '.join(sorted(self.streams))}"
            ) from None

    def blobs(self) -> list[str]:
        """Every blob this version names (not counting its manifest)."""
        out = []
        for s in self.streams.values():
            out.append(s.timestamps)
            out.extend(d for d, _ in s.data)
            if s.sizes:
                out.append(s.sizes)
        return out

    def timestamps(self, name: str) -> np.ndarray:
        info = self.stream(name)
        return self._checked(self._npy(info.timestamps), (info.count,), "<i8", f"stream {name} timestamps")

    def values(self, name: str) -> np.ndarray:
        """All values of an array or pose stream, ``(N, *shape)``."""
        info = self.stream(name)
        if info.is_image:
            raise InvalidInput(f"{self.id}: stream {name!r} holds images, not array values")
        return self._checked(self._npy(info.data[0][0]), (info.count, *info.shape), info.dtype, f"stream {name}")

    def frame_bytes(self, name: str, index: int) -> bytes:
        """Frame ``index`` of an encoded image stream, as recorded."""
        return bytes(self.frame_view(name, index))

    def frame_view(self, name: str, index: int) -> memoryview:
        """Frame ``index`` of an encoded image stream, as recorded: a view of the blob it is in
        (no copy; it keeps that blob's bytes alive)."""
        info, offsets = self._frame_offsets(name)
        blob, first = self._chunk_of(info, index)
        base = offsets[first]
        raw = self._raw(blob)
        start, end = int(offsets[index] - base), int(offsets[index + 1] - base)
        if not 0 <= start <= end <= len(raw):
            raise Malformed(f"{self.id}: stream {name} frame {index} lies at bytes {start}-{end} of a {len(raw)}-byte blob")
        return memoryview(raw)[start:end]

    def frame_sizes(self, name: str) -> np.ndarray:
        """The byte size of every frame of an encoded image stream, as recorded."""
        return np.diff(self._frame_offsets(name)[1])

    def _frame_offsets(self, name: str) -> tuple[StreamInfo, np.ndarray]:
        """An encoded stream's info and where each of its frames starts (one more: the end)."""
        info = self.stream(name)
        if info.sizes is None:
            raise InvalidInput(f"{self.id}: stream {name!r} holds raw frames, not encoded bytes")
        offsets = self._cached("offsets:" + info.sizes, _offsets_of, info.sizes)
        if len(offsets) != info.count + 1:
            raise Malformed(f"{self.id}: stream {name} has {len(offsets) - 1} frame sizes for {info.count} frames")
        return info, offsets

    def frame_array(self, name: str, index: int) -> np.ndarray:
        """Frame ``index`` decoded (or as stored, for raw streams), ``(H, W[, C])``."""
        info = self.stream(name)
        if info.encoding == "raw":
            blob, first = self._chunk_of(info, index)
            n = dict(info.data)[blob]
            result: np.ndarray = self._checked(self._npy(blob), (n, *info.shape), info.dtype, f"stream {name}")[index - first]
            return result
        if info.encoding is None:
            raise InvalidInput(f"{self.id}: stream {name!r} holds array values, not frames")
        return imagecodec.decode(self.frame_bytes(name, index), info.encoding, expect=info.shape[:2],
                                 what=f"{self.id} stream {name} frame {index}")

    def _checked(self, array: np.ndarray, shape: tuple[int, ...], dtype: str, what: str) -> np.ndarray:
        if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
            raise Malformed(f"{self.id}@{self.version[:12]}: {what} is {array.shape} {array.dtype}, "
                            f"its manifest says {tuple(shape)} {np.dtype(dtype)}")
        return array

    # Blobs are content-addressed, so caching them by hash can never serve stale bytes.
    def _raw(self, digest: str) -> bytes:
        result: bytes = self._cached(digest, lambda b: b)
        return result

    def _npy(self, digest: str) -> np.ndarray:
        result: np.ndarray = self._cached("npy:" + digest, lambda b: records.from_npy(b, f"blob {digest[:16]}"), digest)
        return result

    def _cached(self, key: str, parse: Callable[[bytes], T], digest: str | None = None) -> T:
        if key in self._blobs:
            self._blobs.move_to_end(key)
            cached: T = self._blobs[key][0]
            return cached
        data = self.store.get_blob(digest or key)
        value = parse(data)
        self._blobs[key] = (value, len(data))
        self._kept_bytes += len(data)
        while self._kept_bytes > BLOBS_KEPT_BYTES and len(self._blobs) > 1:
            self._kept_bytes -= self._blobs.popitem(last=False)[1][1]
        return value

    @staticmethod
    def _chunk_of(info: StreamInfo, index: int) -> tuple[str, int]:
        if not 0 <= index < info.count:
            raise IndexError(f"stream {info.name}: frame {index} of {info.count}")
        first = 0
        for blob, n in info.data:
            if index < first + n:
                return blob, first
            first += n
        raise AssertionError("unreachable: counts are checked on write")


class Segments:
    """``client.segments``: add, get and list segments."""

    def __init__(self, store: CachedStore):
        self.store = store

    def add(
        self,
        site: str,
        name: str,
        streams: Sequence[Stream],
        meta: Mapping[str, Any] | None = None,
        *,
        allow_nonfinite: bool = False,
    ) -> SegmentRef:
        """Store a segment; returns its id and version (the same version if nothing changed).
        A NaN or infinity in a float array stream is refused (naming the stream and its first
        such row) unless ``allow_nonfinite``; packs' statistics then leave them out."""
        return self.add_many([(site, name, streams, meta)], allow_nonfinite=allow_nonfinite)[0]

    def add_many(self, segments: Sequence[tuple[str, str, Sequence[Stream], Mapping[str, Any] | None]], *,
                 allow_nonfinite: bool = False) -> list[SegmentRef]:
        """Store several segments all or nothing: every one is checked and its data stored
        before the first becomes visible (its ref is written). A failure takes back the blobs
        this call wrote (none of them was visible yet), so the store is left as it was."""
        with self.store.recording_new_blobs() as written:
            try:
                refs = self.store_many(segments, allow_nonfinite=allow_nonfinite)
            except BaseException:
                self.discard(written)
                raise
        self.record(refs)
        return refs

    def store_many(self, segments: Sequence[tuple[str, str, Sequence[Stream], Mapping[str, Any] | None]], *,
                   allow_nonfinite: bool = False) -> list[SegmentRef]:
        """Check and store each segment's data and manifest, making none visible yet: what
        ``record`` does (an ingest stores every source before it records any)."""
        return [self._put(site, name, streams, meta, allow_nonfinite) for site, name, streams, meta in segments]

    def record(self, refs: Sequence[SegmentRef]) -> None:
        """Make stored segment versions visible: each becomes its segment's latest."""
        for ref in refs:
            self._record_version(ref.id, ref.site, ref.name, ref.version)

    def discard(self, blobs: Sequence[str]) -> None:
        """Take back blobs a failed write stored (new ones, that nothing names yet)."""
        for digest in dict.fromkeys(blobs):
            try:
                self.store.delete_blob(digest)
            except RayformError as e:  # left to `rayform gc`, which finds it unreachable
                log.warning("rayform: could not remove blob %s of a failed write: %s", digest[:16], e)

    def _put(self, site: str, name: str, streams: Sequence[Stream], meta: Mapping[str, Any] | None,
             allow_nonfinite: bool = False) -> SegmentRef:
        check_site(site)
        if not isinstance(name, str) or not name or len(name) > 1024:
            raise InvalidInput(f"segment name {str(name)[:80]!r}: a non-empty string of at most 1024 characters")
        if not streams:
            raise InvalidInput(f"segment {site}/{name}: no streams")
        sid = segment_id(site, name)
        entries: dict[str, Any] = {}
        for stream in streams:
            check_stream_name(stream.name)
            if stream.name in entries:
                raise InvalidInput(f"segment {site}/{name}: stream {stream.name!r} given twice")
            try:
                entries[stream.name] = self._put_stream(stream, allow_nonfinite).to_manifest()
            except InvalidInput as e:  # which segment, for a source of many
                raise type(e)(f"segment {site}/{name}: {e}") from None
        manifest = {
            "format": SEGMENT_FORMAT,
            "id": sid,
            "site": site,
            "name": name,
            "meta": dict(meta or {}),
            "streams": entries,
        }
        version = self.store.put_json_blob(manifest)
        return SegmentRef(sid, version, site, name)

    def get(self, segment_id: str, version: str | None = None) -> Segment:
        """A segment version (the latest when ``version`` is None)."""
        if not isinstance(segment_id, str) or not names.SEGMENT_ID.fullmatch(segment_id):
            raise SegmentNotFound(f"{str(segment_id)[:80]!r}: not a segment id (they look like seg_0123456789ab)")
        if version is None:
            versions = self.versions(segment_id)
            version = versions[-1]
        elif not isinstance(version, str) or not names.DIGEST.fullmatch(version):
            raise SegmentNotFound(f"{segment_id}@{str(version)[:80]}: not a segment version (64 hex)")
        try:
            manifest = self.store.get_json_blob(version, f"segment manifest of {segment_id}")
        except NotFound:
            raise SegmentNotFound(
                f"{segment_id}@{version[:12]}: no such segment version in {self.store.display}"
            ) from None
        if manifest.get("format") != SEGMENT_FORMAT or manifest.get("id") != segment_id:
            raise SegmentNotFound(f"{segment_id}@{version[:12]}: that blob is not this segment")
        return Segment(self.store, version, manifest)

    def versions(self, segment_id: str, site: str | None = None) -> list[str]:
        """All versions of a segment, oldest first (``site``, where known, saves a listing)."""
        if site is not None:
            key = f"refs/segments/{check_site(site)}/{names.segment_id(segment_id, trusted=True)}.json"
            try:
                found: list[str] = self.store.get_ref(key, parse=lambda r: self._parse_ref(r, key))["versions"]
                return found
            except NotFound:
                pass
        result: list[str] = self._ref(segment_id)["versions"]
        return result

    def list(self, site: str | None = None) -> list[SegmentRef]:
        """The latest version of every segment, at one site or at all of them."""
        prefix = f"refs/segments/{check_site(site)}" if site else "refs/segments"
        out = []
        for key in self.store.list_refs(prefix):
            parts = key.split("/")
            if len(parts) == 4 and names.SEGMENT_ID.fullmatch(parts[3].removesuffix(".json")):
                ref = self.store.get_ref(key, parse=functools.partial(self._parse_ref, key=key))
                out.append(SegmentRef(ref["id"], ref["versions"][-1], ref["site"], ref["name"]))
        return sorted(out, key=lambda r: (r.site, r.name))

    def sites(self) -> builtins.list[str]:
        return sorted({r.site for r in self.list()})

    # -- internals ---------------------------------------------------------------------
    def _ref(self, segment_id: str) -> dict[str, Any]:
        for key in self.store.list_refs("refs/segments"):
            if key.endswith(f"/{segment_id}.json"):
                result: dict[str, Any] = self.store.get_ref(key, parse=functools.partial(self._parse_ref, key=key))
                return result
        raise SegmentNotFound(f"{segment_id}: no such segment in {self.store.display}")

    def _parse_ref(self, ref: Any, key: str) -> dict[str, Any]:
        """A segment ref, checked: its id matches its key, its versions are digests."""
        what = f"ref {key} in {self.store.display}"
        mapping(ref, what)
        sid = names.segment_id(ref.get("id"), f"{what}: id")
        site = names.site(ref.get("site"), f"{what}: site", trusted=False)
        if key != f"refs/segments/{site}/{sid}.json":
            raise Malformed(f"{what}: names the segment {sid} at {site}, which does not live there")
        versions = [names.digest(v, f"{what}: version") for v in array_list(ref, "versions", what)]
        if not versions:
            raise Malformed(f"{what}: no versions")
        return {"id": sid, "site": site, "name": string(ref, "name", what), "versions": versions}

    def _record_version(self, sid: str, site: str, name: str, version: str) -> None:
        key = f"refs/segments/{site}/{sid}.json"
        ref = self._ref_at(key, sid, site, name)
        if ref["versions"] and ref["versions"][-1] == version:
            return
        ref["versions"].append(version)
        self.store.put_ref(key, ref)

    def record_versions(self, ref: SegmentRef, versions: Sequence[str], order: Sequence[str]) -> None:
        """Add ``versions`` of a segment to this store's ref (``rayform push``), each placed
        after the versions ``order`` (the source's list, oldest first) puts before it, so a
        pushed old version never becomes the latest."""
        key = f"refs/segments/{ref.site}/{ref.id}.json"
        current = self._ref_at(key, ref.id, ref.site, ref.name)
        have = list(current["versions"])
        rank = {v: i for i, v in enumerate(order)}
        for version in versions:
            if version in have:
                continue
            known = [i for i, v in enumerate(have) if v in rank]
            earlier = [i for i in known if rank[have[i]] < rank[version]]
            # after the last version the source has before it; first if the source has
            # only later ones here; last if this store's versions are all its own
            have.insert(earlier[-1] + 1 if earlier else 0 if known else len(have), version)
        if have != current["versions"]:
            self.store.put_ref(key, {**current, "versions": have})

    def _ref_at(self, key: str, sid: str, site: str, name: str) -> dict[str, Any]:
        try:
            ref: dict[str, Any] = self.store.get_ref(key, parse=lambda r: self._parse_ref(r, key))
            return ref
        except NotFound:
            return {"id": sid, "site": site, "name": name, "versions": []}

    def _put_stream(self, stream: Stream, allow_nonfinite: bool = False) -> StreamInfo:
        if isinstance(stream, ImageStream):
            return self._put_images(stream)
        if isinstance(stream, (ArrayStream, PoseStream)):
            return self._put_array(stream, allow_nonfinite)
        raise InvalidInput(f"{stream!r}: not an ImageStream, ArrayStream or PoseStream")

    def _put_array(self, stream: ArrayStream | PoseStream, allow_nonfinite: bool = False) -> StreamInfo:
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
        return StreamInfo(
            name=stream.name,
            kind=kind,
            count=len(values),
            dtype=values.dtype.str,
            shape=tuple(values.shape[1:]),
            timestamps=self.store.put_blob(records.to_npy(ts)),
            data=((self.store.put_blob(records.to_npy(values)), len(values)),),
            units=stream.units,
            names=names,
            frame=frame,
            meta=dict(stream.meta),
        )

    def _put_images(self, stream: ImageStream) -> StreamInfo:
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
                (self.store.put_blob(records.to_npy(frames[i : i + per_chunk])), len(frames[i : i + per_chunk]))
                for i in range(0, len(frames), per_chunk)
            )
            return StreamInfo(
                name=stream.name, kind="image", count=len(frames), dtype=frames.dtype.str,
                shape=tuple(frames.shape[1:]), timestamps=self.store.put_blob(records.to_npy(ts)),
                data=chunks, encoding="raw", meta=dict(stream.meta),
            )
        encoding = _common_encoding(stream.name, frames)
        first = imagecodec.decode(frames[0], encoding, what=f"stream {stream.name} frame 0")
        _check_frame_sizes(stream.name, frames, encoding, first.shape[:2])
        return StreamInfo(
            name=stream.name, kind="image", count=len(frames), dtype=first.dtype.str,
            shape=tuple(first.shape), timestamps=self.store.put_blob(records.to_npy(ts)),
            data=tuple(self._put_frame_chunks(frames)), encoding=encoding,
            sizes=self.store.put_blob(records.to_npy(np.array([len(f) for f in frames], np.int64))),
            meta=dict(stream.meta),
        )

    def _put_frame_chunks(self, frames: Sequence[bytes]) -> Iterable[tuple[str, int]]:
        buf: list[bytes] = []
        size = 0
        for f in frames:
            buf.append(bytes(f))
            size += len(f)
            if size >= IMAGE_CHUNK_BYTES:
                yield self.store.put_blob(b"".join(buf)), len(buf)
                buf, size = [], 0
        if buf:
            yield self.store.put_blob(b"".join(buf)), len(buf)


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


def _offsets_of(sizes_npy: bytes) -> np.ndarray:
    sizes = records.from_npy(sizes_npy, "frame sizes")
    if sizes.ndim != 1 or sizes.dtype.kind not in "iu" or (len(sizes) and sizes.min() < 0):
        raise Malformed(f"frame sizes: {sizes.shape} {sizes.dtype} is not a list of byte counts")
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _check_frame_sizes(name: str, frames: Sequence[bytes], encoding: str, size: tuple[int, ...]) -> None:
    """Every frame of a stream has the first one's height and width (read from its header)."""
    for i, f in enumerate(frames):
        hw = imagecodec.dimensions(f, encoding, what=f"stream {name} frame {i}")
        if hw != tuple(size):
            raise InvalidInput(f"stream {name}: frame {i} is {hw[1]}x{hw[0]}, frame 0 is {size[1]}x{size[0]}; "
                               "a stream's frames share one size")


def _common_encoding(name: str, frames: Sequence[bytes]) -> str:
    first = imagecodec.sniff(frames[0])
    for i, f in enumerate(frames):
        if not bytes(f[:3]) == bytes(frames[0][:3]):
            raise InvalidInput(f"stream {name}: frame {i} is {imagecodec.sniff(f)}, frame 0 is {first}")
    return first
