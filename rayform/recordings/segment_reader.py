"""A stored segment version, read: its manifest, and its streams' data read on demand.

Blobs are content-addressed, so caching what was read by hash can never serve stale bytes:
a segment keeps up to ``BLOBS_KEPT_BYTES`` of them, so that rendering a run of its samples
reads (and hashes) each blob once.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.codec import imagecodec, records
from rayform.errors import InvalidInput, Malformed, StreamNotFound
from rayform.recordings.stored_video import StoredVideo
from rayform.recordings.streams import StreamInfo, task_of
from rayform.store.bundle import Bundle
from rayform.untrusted import mapping, string

# What a segment keeps of its blobs once read: every stream's timestamps, values and frame
# sizes and a few frame chunks of each camera, so that rendering a run of its samples reads
# (and hashes) each blob once
BLOBS_KEPT_BYTES = 128 << 20

T = TypeVar("T")


class Segment:
    """One stored segment version: its manifest, and its stream data read on demand."""

    def __init__(self, store: CachedStore, version: str, manifest: Mapping[str, Any], bundle: Bundle | None = None):
        what = f"segment manifest {version[:16]}"
        mapping(manifest, what)
        self.store = store
        self.version = version
        self.bundle = bundle  # where its manifest and small arrays are (None: loose blobs)
        self.id: str = names.segment_id(manifest.get("id"), f"{what}: id")
        self.site: str = names.site(manifest.get("site"), f"{what}: site", trusted=False)
        self.name: str = string(manifest, "name", what)
        self.meta: dict[str, Any] = dict(mapping(manifest.get("meta", {}), f"{what}: meta"))
        self.streams: dict[str, StreamInfo] = {
            n: StreamInfo.from_manifest(n, s, what) for n, s in mapping(manifest.get("streams"), what).items()
        }
        self._blobs: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._videos: dict[str, StoredVideo] = {}
        self._kept_bytes = 0

    def __repr__(self) -> str:
        return f"Segment({self.id}@{self.version[:8]}, site={self.site!r}, name={self.name!r})"

    @property
    def task(self) -> str:
        """The segment's task or language instruction (``streams.task_of``)."""
        return task_of(self.meta)

    def stream(self, name: str) -> StreamInfo:
        try:
            return self.streams[name]
        except KeyError:
            raise StreamNotFound(
                f"{self.id}: no stream {name!r}. It has: {', '.join(sorted(self.streams))}"
            ) from None

    def blobs(self) -> list[str]:
        """Every blob this version names (not counting its manifest)."""
        return [blob for info in self.streams.values() for blob, _ in info.blobs()]

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
        """Frame ``index`` of an encoded image stream (a video's: packet ``index``), as recorded:
        a view of the blob it is in (no copy; it keeps that blob's bytes alive)."""
        info, offsets = self._frame_offsets(name)
        blob, first = self._chunk_of(info, index)
        base = offsets[first]
        raw = self._raw(blob)
        start, end = int(offsets[index] - base), int(offsets[index + 1] - base)
        if not 0 <= start <= end <= len(raw):
            raise Malformed(f"{self.id}: stream {name} frame {index} lies at bytes {start}-{end} of a {len(raw)}-byte blob")
        return memoryview(raw)[start:end]

    def frame_sizes(self, name: str) -> np.ndarray:
        """The byte size of every frame of an encoded image stream (a video's: every packet), as recorded."""
        return np.diff(self._frame_offsets(name)[1])

    def video(self, name: str) -> StoredVideo:
        """A video stream's packets, times and frames (``stored_video``), read once per segment."""
        found = self._videos.get(name)
        if found is None:
            info = self.stream(name)
            if info.video is None:
                raise InvalidInput(f"{self.id}: stream {name!r} is not a video")
            index = records.from_npy(self.blob(info.video.index), f"{self.id} stream {name} packet index")
            found = self._videos[name] = StoredVideo(info, index, self.timestamps(name),
                                                     functools.partial(self.frame_view, name),
                                                     f"{self.id}@{self.version[:12]} stream {name}")
        return found

    def _frame_offsets(self, name: str) -> tuple[StreamInfo, np.ndarray]:
        """An encoded stream's info and where each of its frames starts (one more: the end)."""
        info = self.stream(name)
        if info.sizes is None:
            raise InvalidInput(f"{self.id}: stream {name!r} holds raw frames, not encoded bytes")
        offsets = self._cached("offsets:" + info.sizes, _offsets_of, info.sizes)
        count = info.video.packets if info.video is not None else info.count
        if len(offsets) != count + 1:
            raise Malformed(f"{self.id}: stream {name} has {len(offsets) - 1} frame sizes for {count} frames")
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
        if info.video is not None:
            return self.video(name).frame(index)
        data = self.frame_bytes(name, index)
        return imagecodec.decode(data, imagecodec.frame_encoding(data, info.encoding), expect=info.shape[:2],
                                 what=f"{self.id} stream {name} frame {index}")

    def _checked(self, array: np.ndarray, shape: tuple[int, ...], dtype: str, what: str) -> np.ndarray:
        if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
            raise Malformed(f"{self.id}@{self.version[:12]}: {what} is {array.shape} {array.dtype}, "
                            f"its manifest says {tuple(shape)} {np.dtype(dtype)}")
        return array

    def blob(self, digest: str) -> bytes | memoryview:
        """A blob this version names, verified: out of its bundle where it is there, else the store's."""
        if self.bundle is not None and digest in self.bundle:
            return self.bundle.get(digest)
        return self.store.get_blob(digest)

    # Blobs are content-addressed, so caching them by hash can never serve stale bytes.
    def _raw(self, digest: str) -> bytes | memoryview:
        result: bytes | memoryview = self._cached(digest, lambda b: b)
        return result

    def _npy(self, digest: str) -> np.ndarray:
        result: np.ndarray = self._cached("npy:" + digest, lambda b: records.from_npy(b, f"blob {digest[:16]}"), digest)
        return result

    def _cached(self, key: str, parse: Callable[[bytes | memoryview], T], digest: str | None = None) -> T:
        if key in self._blobs:
            self._blobs.move_to_end(key)
            cached: T = self._blobs[key][0]
            return cached
        data = self.blob(digest or key)
        value = parse(data)
        self._blobs[key] = (value, len(data))
        self._kept_bytes += len(data)
        while self._kept_bytes > BLOBS_KEPT_BYTES and len(self._blobs) > 1:
            self._kept_bytes -= self._blobs.popitem(last=False)[1][1]
        return value

    @staticmethod
    def _chunk_of(info: StreamInfo, index: int) -> tuple[str, int]:
        count = info.video.packets if info.video is not None else info.count
        if not 0 <= index < count:
            raise IndexError(f"stream {info.name}: frame {index} of {count}")
        first = 0
        for blob, n in info.data:
            if index < first + n:
                return blob, first
            first += n
        raise AssertionError("unreachable: counts are checked on write")


def _offsets_of(sizes_npy: bytes | memoryview) -> np.ndarray:
    sizes = records.from_npy(sizes_npy, "frame sizes")
    if sizes.ndim != 1 or sizes.dtype.kind not in "iu" or (len(sizes) and sizes.min() < 0):
        raise Malformed(f"frame sizes: {sizes.shape} {sizes.dtype} is not a list of byte counts")
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
