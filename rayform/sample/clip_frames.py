"""A video camera's frames for a batch: each clip the batch reads decoded once, its frames kept
for the samples still to come.

A sample of a video pack names its clip (the member it shares with the clip's first sample,
``pack.layout``) and its frames in it (its record's ``frames``: now, then each step back).
The samples of a batch are grouped by clip; a clip not yet decoded is checked
(``codec.clip.read_clip``: codec and size against the pack's schema, before a decoder sees a
byte) and decoded by the process's :class:`ClipDecoder`:

- ``whole=True`` (the datasets' clip-aware orders): every frame of each group of pictures the
  batch reaches into, once, since the order brings the clip's next samples soon after
  (``order.lanes``), in time order;
- ``whole=False`` (random access in any order): from the keyframe at or before the first
  frame the batch wants up to the last (LeRobot's way; a batch's samples of one clip share
  it), only the frames wanted converted to RGB.

A decoded frame is kept (at the size the samples take) while a sample of its clip not yet
built here still shows it, now or as history (its clip's record says which: ``uses``): so a
clip of 64 samples held by a lane read in time order holds a group or two of frames, not 64.
A clip is let go once all its samples are built, or when it is the oldest and
``RAYFORM_DECODED_FRAMES`` would be passed (by default 192 MiB, or what the order's lanes
hold at once where that is more: ``SampleBuilder.read_in_lanes``; a budget below it would
let go of the frames a lane needs next, lane after lane).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform import config
from rayform.codec.clip import MAX_PACKETS, read_clip
from rayform.codec.video import ClipDecoder, PyAVDecoder
from rayform.errors import Malformed
from rayform.pack.layout import StreamSchema


class _Decoded:
    __slots__ = ("frames", "left", "nbytes", "uses")

    def __init__(self, left: int, uses: np.ndarray):
        self.frames: dict[int, np.ndarray] = {}
        self.left = left  # samples of the clip not yet built here
        self.nbytes = 0
        self.uses = uses  # per frame of the clip: the wanted places of samples not yet built here showing it


class DecodedClips:
    """The frames this process has decoded and not yet used up, by clip."""

    def __init__(self, decoder: ClipDecoder | None = None, limit: int | None = None):
        self._given = decoder
        self._limit = limit
        self.working_set = 0  # bytes of frames the order's lanes hold at once (``SampleBuilder.read_in_lanes``)
        self._reset()

    def _reset(self) -> None:
        self.decoder: ClipDecoder = self._given or PyAVDecoder()
        self.limit = self._budget()
        self._clips: OrderedDict[Hashable, _Decoded] = OrderedDict()
        self._bytes = 0
        self.built = 0  # samples whose frames came from here, for measures
        self.peak = 0  # the most bytes of frames held at once, for measures
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"_given": self._given, "_limit": self._limit, "working_set": self.working_set}  # a process decodes for itself

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def hold(self, working_set: int) -> None:
        """The reading order holds about ``working_set`` bytes of frames at once: keep room
        for them (``config.decoded_frames``)."""
        self.working_set = working_set
        self.limit = self._budget()

    def _budget(self) -> int:
        return config.decoded_frames(needed=self.working_set) if self._limit is None else self._limit

    @property
    def decoded(self) -> int:
        return self.decoder.decoded

    def fill(self, s: StreamSchema, items: Sequence[ClipItem],
             size: tuple[int, int] | None, whole: bool) -> None:
        """For each sample's :func:`clip_item`: write the frames it wants into its rows (one row
        per frame wanted)."""
        if self._pid != os.getpid():  # a forked worker: its own decoders and frames
            self._reset()
        groups: dict[Hashable, list[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault((s.name, size, item.key), []).append(i)
        for key, members in groups.items():
            first = items[members[0]]
            entry = self._clips.get(key)
            if entry is None:
                entry = _Decoded(first.samples, first.uses())
            wanted = {f for i in members for f in items[i].frames}
            missing = sorted(wanted - set(entry.frames))
            if missing:
                self._decode(s, first.clip, entry, missing, size, whole, first.what)
            self._clips[key] = entry
            self._clips.move_to_end(key)
            for i in members:
                item = items[i]
                for row, f in zip(item.rows, item.frames):
                    np.copyto(row, entry.frames[f].reshape(row.shape))
            for i in members:  # after every copy: a batch may hold a sample twice (a padded last batch)
                self._used(entry, items[i].frames)
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
        if len(entry.uses) < clip.frames:  # frames no sample wants: none of them counted
            entry.uses = np.concatenate([entry.uses, np.zeros(clip.frames - len(entry.uses), np.int64)])
        asked = missing
        if whole:  # every frame still to be shown of the groups the batch reaches into: the next samples' too
            start = clip.start_for(missing[0])
            end = min((k for k in clip.keys if k > missing[-1]), default=clip.frames) if not clip.reorders else \
                clip.frames
            asked = [f for f in range(start, end) if f not in entry.frames and (entry.uses[f] or f in missing)]
        got = self.decoder.decode(clip, asked, size, f"{what}, {s.name}")
        for f, image in got.items():
            entry.frames[f] = image
            entry.nbytes += image.nbytes
            self._bytes += image.nbytes
        self.peak = max(self.peak, self._bytes)

    def _used(self, entry: _Decoded, frames: list[int]) -> None:
        """One sample showing ``frames`` built: let go of the frames no sample still to come shows."""
        for f in frames:
            entry.uses[f] -= 1
            if entry.uses[f] <= 0 and f in entry.frames:
                image = entry.frames.pop(f)
                entry.nbytes -= image.nbytes
                self._bytes -= image.nbytes

    def _drop(self, key: Hashable) -> None:
        entry = self._clips.pop(key)
        self._bytes -= entry.nbytes

    def _bound(self) -> None:
        while self._clips and self._bytes > self.limit:
            self._drop(next(iter(self._clips)))


@dataclass(frozen=True)
class ClipItem:
    """One sample's entry for :meth:`DecodedClips.fill`: its clip (``key`` names it; ``clip``,
    its document, of ``samples`` samples whose frames are ``table``: per sample, now then each
    step back), the frames it wants (``back``, steps back, 0 now), and the rows they go to."""

    key: Hashable
    clip: Any
    samples: Any
    table: np.ndarray
    back: tuple[int, ...]
    frames: list[int]
    rows: np.ndarray
    what: str

    def uses(self) -> np.ndarray:
        """Per frame of the clip (up to the last one wanted): how many of its samples' wanted
        places show it."""
        count = self.samples
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 4096:
            raise Malformed(f"{self.what}: its record's clip count {str(count)[:20]} is not 1..4096")
        shown = self.table[:, list(self.back)].ravel()
        if shown.size and int(shown.max()) >= MAX_PACKETS:  # bounded before a count is allocated for each
            raise Malformed(f"{self.what}: its record names frame {int(shown.max())} of a clip (at most {MAX_PACKETS})")
        return np.bincount(shown, minlength=int(shown.max(initial=0)) + 1).astype(np.int64)


def clip_item(key: Hashable, clip: Any, samples: int, table: np.ndarray, j: int, back: Sequence[int],
              row: np.ndarray, what: str) -> ClipItem:
    """Sample ``j`` of its clip (see :class:`ClipItem`), its frames going to ``row``."""
    rows = row if tuple(back) != (0,) else row[None]
    return ClipItem(key, clip, samples, table, tuple(back), [int(table[j, k]) for k in back], rows, what)
