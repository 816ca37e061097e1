"""What the episode page shows of one segment version: its streams, task and metadata; every
array and pose stream as plot series; each camera's frames as recorded; a recorded video
remuxed to MP4 (its packets copied, not one pixel re-encoded) for the browser to play.

Times are seconds from the segment's first timestamp, the page's one clock.
"""

from __future__ import annotations

import io
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from rayform.codec import imagecodec
from rayform.codec.codecs import VIDEO
from rayform.errors import InvalidInput, Malformed, SegmentNotFound, StreamNotFound
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segments import Segments
from rayform.recordings.streams import StreamInfo

PLOT_POINTS = 4000  # a plot's points at most (a long stream reduced bucket by bucket to its extremes)
POSE_LABELS = ["x", "y", "z", "qx", "qy", "qz", "qw"]
# what a browser is asked whether it plays (RFC 6381 codecs strings of a common profile each)
BROWSER_CODECS = {name: c.browser for name, c in VIDEO.items()}
MP4_KEPT_BYTES = 512 << 20  # remuxed videos kept for the browser's range requests
MP4_MAX_BYTES = 1 << 30  # a longer recording is shown frame by frame (a remux is held in memory whole)
_TIMESCALE = 90_000


class Episodes:
    """Segments the pages read, a few kept open (their blobs are cached by ``Segment``)."""

    KEPT = 16

    def __init__(self, segments: Segments, latest: Callable[[str], tuple[str, str | None] | None],
                 findings: Callable[[str, str], list[dict[str, Any]]] | None = None):
        self.segments = segments
        self.latest = latest  # a segment's latest version and its bundle (the list's table has them at hand)
        self.findings = findings or (lambda _segment, _version: [])  # a version's flagged health findings
        self._lock = threading.Lock()
        self._open: OrderedDict[tuple[str, str], Segment] = OrderedDict()
        self._mp4: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._remuxing: dict[tuple[str, str], threading.Lock] = {}  # a video being remuxed: its lock
        self._mp4_bytes = 0
        # a stored video decodes with one decoder it keeps between frames (StoredVideo's
        # cursor): one request's frames at a time
        self._decoding = threading.Lock()

    def segment(self, segment_id: str, version: str | None) -> Segment:
        """A version of a segment (None: its latest), kept open for the page's next requests."""
        found = self._kept(segment_id, version) if version is not None else None
        if found is not None:
            return found
        latest = self.latest(segment_id)
        if version is None:
            if latest is None:
                raise SegmentNotFound(f"{segment_id}: no such segment in {self.segments.store.display}")
            version = latest[0]
            found = self._kept(segment_id, version)
            if found is not None:
                return found
        # the latest version's bundle is at hand; an older one's is looked up in the catalog
        found = self.segments.get(segment_id, version, latest[1] if latest and latest[0] == version else None)
        with self._lock:
            self._open[(segment_id, version)] = found
            while len(self._open) > self.KEPT:
                self._open.popitem(last=False)
        return found

    def _kept(self, segment_id: str, version: str) -> Segment | None:
        with self._lock:
            found = self._open.get((segment_id, version))
            if found is not None:
                self._open.move_to_end((segment_id, version))
            return found

    def summary(self, segment_id: str, version: str | None) -> dict[str, Any]:
        """The segment's name, site, task, metadata, time span, and each stream: what it is,
        its frames' times (cameras) and how the page shows it."""
        seg = self.segment(segment_id, version)
        start, end = span_of(seg)
        streams = []
        for name, info in sorted(seg.streams.items()):
            entry: dict[str, Any] = {"name": name, "kind": info.kind, "count": info.count, "dtype": info.dtype,
                                     "shape": list(info.shape), "units": info.units,
                                     "names": list(info.names) if info.names else None}
            if info.is_image:
                entry["encoding"] = info.encoding
                entry["times"] = _seconds(seg.timestamps(name), start).tolist()
                entry["codec"] = info.video.codec if info.video is not None else None
                entry["mp4"] = _playable(seg, name)
                if entry["mp4"]:
                    assert info.video is not None
                    entry["mime"] = f'video/mp4; codecs="{BROWSER_CODECS[info.video.codec]}"'
                    # the MP4's time 0 is its first packet's, a lead-in's before the first frame
                    entry["mp4_start"] = (int(seg.video(name).packet_times.min()) - start) / 1e9
            streams.append(entry)
        findings = [{**f, "from_s": (int(f.get("start_ns", start)) - start) / 1e9,
                     "to_s": (int(f.get("end_ns", start)) - start) / 1e9} for f in self.findings(seg.id, seg.version)]
        return {"id": seg.id, "version": seg.version, "site": seg.site, "name": seg.name, "task": seg.task,
                "meta": seg.meta, "start_ns": start, "duration_s": round((end - start) / 1e9, 6), "streams": streams,
                "latest": (self.latest(seg.id) or (seg.version,))[0], "findings": findings}

    def series(self, segment_id: str, version: str | None,
               window: tuple[float, float] | None = None) -> dict[str, Any]:
        """Each array and pose stream: its times and values (at most ``PLOT_POINTS``: a long
        stream reduced to each bucket's least and greatest value, ``min_max``), the element
        names; non-finite values as nulls. ``window``: only the samples from ``start`` to ``end``
        seconds of the episode (and one each side, so the lines reach its edges), reduced
        alike: zooming in shows every sample once the window holds few enough."""
        seg = self.segment(segment_id, version)
        start, _ = span_of(seg)
        out = {}
        for name, info in sorted(seg.streams.items()):
            if info.is_image:
                continue
            t = seg.timestamps(name)
            first, end = 0, len(t)
            if window is not None:
                first = max(0, int(np.searchsorted(t, start + round(window[0] * 1e9), "left")) - 1)
                end = min(len(t), int(np.searchsorted(t, start + round(window[1] * 1e9), "right")) + 1)
            t = t[first:end]
            values = seg.values(name)[first:end].reshape(len(t), -1).astype(np.float64)
            stride = max(1, -(-len(t) // (PLOT_POINTS // 2)))
            if stride > 1:
                t, values = min_max(t, values, stride)
            labels = POSE_LABELS if info.kind == "pose" else list(info.names) if info.names and \
                len(info.names) == values.shape[1] else [str(i) for i in range(values.shape[1])]
            columns = [finite_list(values[:, k]) for k in range(values.shape[1])]
            out[name] = {"kind": info.kind, "t": _seconds(t, start).tolist(), "labels": labels, "values": columns,
                         "units": info.units, "stride": stride}
        return out

    def frame(self, segment_id: str, version: str | None, stream: str, index: int) -> tuple[bytes, str]:
        """Frame ``index`` of a camera as the browser shows it: a JPEG or PNG as recorded, else
        (raw frames, a video frame) encoded as JPEG; and its media type."""
        seg = self.segment(segment_id, version)
        info = _camera(seg, stream)
        if not 0 <= index < info.count:
            raise InvalidInput(f"{seg.id}: {stream} has frames 0..{info.count - 1}, not {index}")
        if info.encoding in ("jpeg", "png", imagecodec.MIXED):
            data = bytes(seg.frame_bytes(stream, index))
            encoding = imagecodec.frame_encoding(data, info.encoding)
            imagecodec.check_dimensions(data, encoding, info.shape[:2], f"{seg.id} {stream} frame {index}")
            return data, "image/jpeg" if encoding == "jpeg" else "image/png"
        with self._decoding:
            image = seg.frame_array(stream, index)
        if image.dtype != np.uint8:  # depth and other raw frames: scaled to their range to be seen
            image = _scaled(image)
        return imagecodec.encode_jpeg(np.ascontiguousarray(image), 90), "image/jpeg"

    def mp4(self, segment_id: str, version: str | None, stream: str) -> bytes:
        """A recorded video's packets as an MP4 the browser plays (each packet's time kept, from
        0 at its first packet's: ``summary``'s ``mp4_start`` says when that is)."""
        seg = self.segment(segment_id, version)
        _camera(seg, stream)  # StreamNotFound for values
        if not _playable(seg, stream):
            raise InvalidInput(f"{seg.id}: {stream} is not a recorded video a browser plays (or it is over "
                               f"{MP4_MAX_BYTES >> 20} MiB); its frames are shown")
        key = (seg.version, stream)
        with self._lock:
            found = self._mp4.get(key)
            if found is not None:
                self._mp4.move_to_end(key)
                return found
            making = self._remuxing.setdefault(key, threading.Lock())
        with making:  # requests for one video at once: the first remuxes it, the others take its MP4
            with self._lock:
                found = self._mp4.get(key)
            if found is not None:
                return found
            data = remux(seg, stream)
            self._keep_mp4(key, data)
        with self._lock:
            self._remuxing.pop(key, None)
        return data

    def _keep_mp4(self, key: tuple[str, str], data: bytes) -> None:
        with self._lock:
            self._mp4[key] = data
            self._mp4_bytes += len(data)
            while self._mp4_bytes > MP4_KEPT_BYTES and len(self._mp4) > 1:
                self._mp4_bytes -= len(self._mp4.popitem(last=False)[1])


def remux(seg: Segment, stream: str) -> bytes:
    """The stream's packets in an MP4, as recorded (the browser asks for its index at the end
    by a range request)."""
    import av

    video = seg.video(stream)
    info = video.video
    pts = video.packet_times.astype(np.int64)
    ticks = (pts - int(pts.min())) * _TIMESCALE // 1_000_000_000
    # decode times: the presentation times in order, shifted so none comes after its own
    ordered = np.sort(ticks)
    dts = ordered - int(np.max(ordered - ticks)) if info.reorders else ticks
    out = io.BytesIO()
    try:
        with av.open(out, mode="w", format="mp4") as container:
            s = container.add_stream(info.codec)
            s.width, s.height, s.pix_fmt = video.width, video.height, "yuv420p"
            s.time_base = s.codec_context.time_base = Fraction(1, _TIMESCALE)
            # PyAV muxes only from a codec context: an encoder's, opened and never fed, then
            # given the recording's own extradata (its SPS/PPS or sequence header) to describe it
            s.codec_context.open()
            s.codec_context.extradata = info.extradata or None
            for p in range(len(pts)):
                packet = av.Packet(bytes(video.packet(p)))
                packet.stream, packet.time_base = s, s.time_base
                packet.pts, packet.dts = int(ticks[p]), int(dts[p])
                packet.is_keyframe = bool(video.keys[p])
                container.mux(packet)
    except (av.FFmpegError, ValueError) as e:
        raise Malformed(f"{seg.id}: {stream}'s packets do not go into an MP4 ({type(e).__name__}: {e})") from None
    return out.getvalue()


def span_of(seg: Segment) -> tuple[int, int]:
    """The segment's first and last timestamp over all its streams (ns)."""
    firsts, lasts = [], []
    for name in seg.streams:
        t = seg.timestamps(name)
        if len(t):
            firsts.append(int(t[0]))
            lasts.append(int(t[-1]))
    return (min(firsts), max(lasts)) if firsts else (0, 0)


def finite_list(values: np.ndarray) -> list[float | None]:
    """Numbers as JSON takes them: a value that is not finite as null."""
    v = np.asarray(values, np.float64).ravel()
    return [float(x) if np.isfinite(x) else None for x in v]


def _seconds(t: np.ndarray, start: int) -> np.ndarray:
    return np.round((t - start) / 1e9, 6)


def _camera(seg: Segment, stream: str) -> StreamInfo:
    info = seg.stream(stream)
    if not info.is_image:
        raise StreamNotFound(f"{seg.id}: {stream} holds values, not frames")
    return info


def _playable(seg: Segment, stream: str) -> bool:
    """Whether a camera is a recorded video the page plays as an MP4 of its packets: a codec
    browsers play, frames found by time (none repeats one), at most ``MP4_MAX_BYTES``. Else
    the page shows its frames one by one."""
    info = seg.stream(stream)
    if info.video is None or info.video.codec not in BROWSER_CODECS:
        return False
    t = seg.timestamps(stream)
    return not (len(t) > 1 and np.any(np.diff(t) <= 0)) and int(seg.frame_sizes(stream).sum()) <= MP4_MAX_BYTES


def _scaled(image: np.ndarray) -> np.ndarray:
    values = image.astype(np.float64)
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    scaled = np.nan_to_num((values - lo) / max(hi - lo, 1e-12) * 255, nan=0.0).clip(0, 255).astype(np.uint8)
    return scaled if scaled.ndim == 2 else scaled[..., :3]


def min_max(t: np.ndarray, values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``values`` (n, elements) in buckets of ``size`` samples, each two points: at its first and
    last time, its least and greatest value in the order they occur (per element). Never a
    stride: one sample in 100,000 stays as far from the line as it is."""
    n = len(t) // size * size
    head, tail = values[:n].reshape(-1, size, values.shape[1]), values[n:]
    with warnings.catch_warnings():  # a bucket of NaN only: NaN, drawn as a hole
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanmin(head, axis=1), np.nanmax(head, axis=1)
        first_low = np.argmin(np.where(np.isnan(head), np.inf, head), axis=1) <= \
            np.argmax(np.where(np.isnan(head), -np.inf, head), axis=1)
        pairs = np.stack([np.where(first_low, lo, hi), np.where(first_low, hi, lo)], axis=1).reshape(-1, values.shape[1])
        times = np.stack([t[:n:size], t[size - 1:n:size]], axis=1).reshape(-1)
        if len(tail):
            times = np.concatenate([times, t[n:][[0, -1]]])
            pairs = np.concatenate([pairs, np.nanmin(tail, axis=0)[None], np.nanmax(tail, axis=0)[None]])
    return times, pairs
