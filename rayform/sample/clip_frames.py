"""A video camera's frames for a batch: each clip the batch reads decoded once, its frames kept
for the samples still to come.

A sample of a video pack names its clip (the member it shares with the clip's first sample,
``pack.layout``) and its frames in it (its record's ``frames``: now, then each step back).
The samples of a batch are grouped by clip; a clip not yet decoded is checked
(``codec.clip.read_clip``: codec and size against the pack's schema, before a decoder sees a
byte) and decoded by the process's :class:`ClipDecoder`:

- ``whole=True`` (the streaming dataset): every frame of the clip, once, since the epoch's
  order brings its other samples soon after (``order.lanes``);
- ``whole=False`` (``EpisodeDataset``'s random access): from the keyframe at or before the
  first frame the batch wants up to the last (LeRobot's way; a batch's samples of one clip
  share it), only the frames wanted converted to RGB.

Decoded frames are kept (at the size the samples take) until every sample of their clip has
been built, or until they are the oldest when ``RAYFORM_DECODED_FRAMES`` would be passed.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from rayform import config
from rayform.codec.clip import read_clip
from rayform.codec.video import ClipDecoder, PyAVDecoder
from rayform.errors import Malformed
from rayform.pack.layout import StreamSchema


class _Decoded:
    __slots__ = ("frames", "left", "nbytes")

    def __init__(self, left: int):
        self.frames: dict[int, np.ndarray] = {}
        self.left = left  # samples of the clip not yet built here
        self.nbytes = 0


class DecodedClips:
    """The frames this process has decoded and not yet used up, by clip."""

    def __init__(self, decoder: ClipDecoder | None = None, limit: int | None = None):
        self._given = decoder
        self._limit = limit
        self._reset()

    def _reset(self) -> None:
        self.decoder: ClipDecoder = self._given or PyAVDecoder()
        self.limit = config.decoded_frames() if self._limit is None else self._limit
        self._clips: OrderedDict[Hashable, _Decoded] = OrderedDict()
        self._bytes = 0
        self.built = 0  # samples whose frames came from here, for measures
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"_given": self._given, "_limit": self._limit}  # a process decodes for itself

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    @property
    def decoded(self) -> int:
        return self.decoder.decoded

    def fill(self, s: StreamSchema, items: Sequence[ClipItem],
             size: tuple[int, int] | None, whole: bool) -> None:
        """For each ``(clip key, clip bytes, samples in the clip, frames wanted, rows, what)``:
        write the frames wanted into ``rows`` (one row per frame wanted)."""
        if self._pid != os.getpid():  # a forked worker: its own decoders and frames
            self._reset()
        groups: dict[Hashable, list[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault((s.name, size, item[0]), []).append(i)
        for key, members in groups.items():
            data, count, _, _, what = items[members[0]][1:]
            entry = self._clips.get(key)
            wanted = {f for i in members for f in items[i][3]}
            missing = sorted(wanted - set(entry.frames)) if entry is not None else sorted(wanted)
            if missing:
                if entry is None:
                    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 4096:
                        raise Malformed(f"{what}: its record's clip count {str(count)[:20]} is not 1..4096")
                    entry = _Decoded(count)
                self._decode(s, data, entry, missing, size, whole, what)
                self._clips[key] = entry
            assert entry is not None
            self._clips.move_to_end(key)
            for i in members:
                _, _, _, frames, rows, what = items[i]
                for row, f in zip(rows, frames):
                    np.copyto(row, entry.frames[f].reshape(row.shape))
            entry.left -= len(members)
            self.built += len(members)
            if entry.left <= 0:
                self._drop(key)
        self._bound()

    def _decode(self, s: StreamSchema, data: Any, entry: _Decoded, missing: list[int], size: tuple[int, int] | None,
                whole: bool, what: str) -> None:
        assert s.video is not None
        clip = read_clip(data, f"{what}, {s.name} clip", s.video.codec, (s.shape[0], s.shape[1]))
        if missing[-1] >= clip.frames:
            raise Malformed(f"{what}: its record names frame {missing[-1]} of a clip of {clip.frames}")
        # whole: every frame, since the clip's other samples come soon; else only those asked (the
        # decoder goes through the frames before them from the keyframe, converting none)
        asked = [f for f in range(clip.frames) if f not in entry.frames] if whole else missing
        got = self.decoder.decode(clip, asked, size, f"{what}, {s.name}")
        for f, image in got.items():
            entry.frames[f] = image
            entry.nbytes += image.nbytes
            self._bytes += image.nbytes

    def _drop(self, key: Hashable) -> None:
        entry = self._clips.pop(key)
        self._bytes -= entry.nbytes

    def _bound(self) -> None:
        while self._clips and self._bytes > self.limit:
            self._drop(next(iter(self._clips)))


ClipItem = tuple[Hashable, Any, Any, list[int], np.ndarray, str]


def clip_item(key: Hashable, clip: Any, samples: int, frames: np.ndarray, back: Sequence[int],
              row: np.ndarray, what: str) -> ClipItem:
    """One sample's entry for :meth:`DecodedClips.fill`: its clip (``key`` names it; ``clip``,
    its document, of ``samples`` samples), its frames in it (now, then each step back), of
    which it wants ``back`` (steps back, 0 now), and the rows they go to."""
    rows = row if tuple(back) != (0,) else row[None]
    return key, clip, samples, [int(frames[k]) for k in back], rows, what
