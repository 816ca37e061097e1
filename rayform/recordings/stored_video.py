"""A segment's stored video stream, read: its packets by index (views of the blobs they are
kept in), their times and keyframes, which packet shows which frame, a frame decoded on its own,
frames decoded one after another (what packing reads: each packet decoded once), and the
packets of a run of frames as a clip (what a pack copies, not one pixel re-encoded).

Everything here comes from the store: the packet index is checked against the manifest
(counts, times, the first packet a keyframe) before anything is decoded, and whatever FFmpeg
makes of a bad packet is one ``Malformed`` naming the stream and the frame.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rayform.codec.clip import Clip
from rayform.codec.video import decoder_context, to_rgb
from rayform.errors import Malformed
from rayform.recordings.streams import StreamInfo


class StoredVideo:
    """Stream ``info`` of a segment (``what`` names it); ``packet(p)`` gives packet ``p``'s bytes,
    ``times`` the frames' timestamps."""

    def __init__(self, info: StreamInfo, index: np.ndarray, times: np.ndarray, packet: Callable[[int], memoryview],
                 what: str):
        video = info.video
        assert video is not None
        self.info, self.video, self.what = info, video, what
        self.height, self.width = info.shape[:2]
        if index.shape != (video.packets, 2) or index.dtype != np.int64:
            raise Malformed(f"{what}: its packet index is {index.shape} {index.dtype}, the manifest says "
                            f"{video.packets} packets")
        self.packet_times, self.keys = index[:, 0], index[:, 1].astype(bool)
        if not self.keys[0]:
            raise Malformed(f"{what}: its first packet is not a keyframe")
        if video.reorders != bool(np.any(np.diff(self.packet_times) < 0)):
            raise Malformed(f"{what}: its packets' times {'do not ' if video.reorders else ''}go back where the "
                            "manifest says otherwise")
        order = np.argsort(self.packet_times, kind="stable")
        at = self.packet_times[order]
        shown = order[(at >= times[0]) & (at <= times[-1])] if len(times) else order[:0]
        if len(shown) != len(times) or not np.array_equal(self.packet_times[shown], times):
            raise Malformed(f"{what}: {len(times)} frames, but its packets' times do not show them one each")
        self.frame_packet = shown  # frame i is shown by packet frame_packet[i]
        self.packet = packet
        self._cursor: _Cursor | None = None

    @property
    def reorders(self) -> bool:
        return self.video.reorders

    def start_packet(self, frame: int) -> int:
        """The packet a decode of ``frame`` starts at: the last keyframe at or before its packet
        (the first packet where packets reorder)."""
        if self.video.reorders:
            return 0
        keys = np.flatnonzero(self.keys[: int(self.frame_packet[frame]) + 1])
        return int(keys[-1])

    def keyframe_gap(self) -> int:
        """The most packets from a keyframe to the next (or to the end)."""
        keys = np.flatnonzero(self.keys)
        return int(np.max(np.diff(np.append(keys, len(self.keys)))))

    def clip(self, first: int, last: int) -> tuple[Clip, int]:
        """Frames ``first … last`` as a clip of the packets as recorded, and the packet it starts
        at: frame ``i`` is the clip's frame ``frame_packet[i] − start`` (packets from the
        keyframe before ``first`` are a lead-in that only decodes). Only where packets do not
        reorder: a frame is then its packet, in order."""
        if self.video.reorders:
            raise Malformed(f"{self.what}: its packets reorder; a clip of them is not copied")
        start, end = self.start_packet(first), int(self.frame_packet[last]) + 1
        packets = tuple(bytes(self.packet(p)) for p in range(start, end))
        keys = tuple(int(k) for k in np.flatnonzero(self.keys[start:end]))
        clip = Clip(self.video.codec, self.width, self.height, end - start, packets, keys, self.video.extradata)
        return clip, start

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` as ``(H, W, 3) uint8`` RGB, decoded from the keyframe before it (frames
        asked in order reuse the decoder: each packet decoded once)."""
        if not 0 <= index < len(self.frame_packet):
            raise IndexError(f"{self.what}: frame {index} of {len(self.frame_packet)}")
        cursor = self._cursor
        target = int(self.packet_times[self.frame_packet[index]])
        if cursor is None or not cursor.reaches(target, self.start_packet(index)):
            cursor = self._cursor = _Cursor(self, self.start_packet(index))
        return cursor.frame_at(target, index)

    def check(self) -> int:
        """Decode every packet (converting nothing), so that damage the hashes cannot see (a
        recording damaged before it was stored) is found: the frames decoded, or one Malformed
        naming the frame."""
        import av

        context = decoder_context(self.video.codec, self.video.extradata, size=(self.height, self.width))
        frames = 0
        try:
            for p in [*range(len(self.packet_times)), None]:
                for f in context.decode(av.Packet(bytes(self.packet(p))) if p is not None else None):
                    if f.is_corrupt:
                        raise _damaged(self.what, frames)
                    frames += 1
        except av.FFmpegError as e:
            raise Malformed(f"{self.what}: frame {frames} does not decode ({type(e).__name__}: {e})") from None
        return frames


def _damaged(what: str, frame: int) -> Malformed:
    """A frame the decoder had to conceal: the recording was damaged before it was stored."""
    return Malformed(f"{what}: frame {frame} is damaged (the decoder found errors in its bitstream). The recording "
                     "is corrupt: ingest it again from a good copy")


class _Cursor:
    """A decoder going forward through a video's packets from ``start``, its frames by time."""

    def __init__(self, video: StoredVideo, start: int):
        self.video = video
        self.context = decoder_context(video.video.codec, video.video.extradata, size=(video.height, video.width))
        from av.video.reformatter import VideoReformatter

        self.convert = VideoReformatter()
        self.next = start
        self.start = start
        self.done = False
        self.frames: dict[int, np.ndarray] = {}  # time -> frame, decoded and not yet asked
        self.last = -(1 << 62)  # the latest time decoded

    def reaches(self, target: int, start: int) -> bool:
        """Whether going on from here gives frame ``target`` (not decoded past it, and not so far
        behind that starting over at its keyframe is shorter)."""
        return (target in self.frames or target > self.last) and start <= max(self.start, self.next)

    def frame_at(self, target: int, index: int) -> np.ndarray:
        import av

        v = self.video
        try:
            while target not in self.frames:
                if self.done:
                    raise Malformed(f"{v.what}: frame {index} does not come out of its packets")
                packet = None
                if self.next < len(v.packet_times):
                    packet = av.Packet(bytes(v.packet(self.next)))
                    packet.pts = self.next  # which packet a frame came from (frames come out in time order)
                    self.next += 1
                else:
                    self.done = True
                for f in self.context.decode(packet):
                    if f.is_corrupt:
                        raise _damaged(v.what, index)
                    if (f.width, f.height) != (v.width, v.height):
                        raise Malformed(f"{v.what}: a frame decoded {f.width}x{f.height}, the stream says "
                                        f"{v.width}x{v.height}")
                    if f.pts is None or not 0 <= f.pts < len(v.packet_times):
                        raise Malformed(f"{v.what}: a frame came out of no packet of it")
                    t = int(v.packet_times[f.pts])
                    self.last = max(self.last, t)
                    self.frames[t] = to_rgb(self.convert, f)
        except av.FFmpegError as e:
            raise Malformed(f"{v.what}: frame {index} does not decode ({type(e).__name__}: {e})") from None
        found = self.frames[target]
        for t in [t for t in self.frames if t < target]:
            del self.frames[t]  # asked in order: what came before is not asked again
        return found

