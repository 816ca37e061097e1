"""``EpisodeDataset``: a map-style dataset over a slice's pack, with random access by offset."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from rayform.errors import raised_here
from rayform.order.lanes import LanePermutation
from rayform.order.mixture import MixtureOrder
from rayform.permutation import Permutation
from rayform.read.reader import PackReader
from rayform.sample.spec import SampleSpec
from rayform.torch.batch import BatchLayout
from rayform.torch.parts import Mixture, OverParts, Parts, check_seed
from rayform.torch.statistics import Statistics
from rayform.torch.streaming import ShuffleConfig, check_batch_size

log = logging.getLogger("rayform")
HINT_AFTER = 512  # samples built before a process judges the order it is read in


class EpisodeDataset(Statistics, OverParts, Dataset[dict[str, Any]]):
    """Time-aligned samples of a slice, served from its pack at ``fps``.

    ``obs`` names the streams each sample carries (images as ``(3, H, W) uint8``, arrays as
    ``float32``); ``action`` is an array stream (its future values) or ``<stream>_delta``
    (future minus current; spelt ``<stream>:delta`` where a stream is recorded under the other),
    ``horizon`` steps long, or a pose stream (``rotation``: ``"quat"``,
    ``"rot6d"``, ``"axis_angle"``) or ``<pose>_delta`` (the relative transform), or a list of
    these concatenated on the last axis (``dataset.action_names`` names every element; see
    ``rayform.sample.action``); ``frame`` re-expresses pose streams in ``"ros"``, ``"optical"``
    or ``"opengl"`` axes (None: as recorded).

    Order: index ``i`` of epoch ``e`` is sample ``P(seed, e)[i]`` of the pack, where ``P`` is
    a fixed pseudo-random permutation. On a video pack, give the DataLoader's ``batch_size``
    (and ``shuffle=False``: the dataset shuffles) and ``P`` is clip-aware: each batch takes its
    samples from as many clips, in a seeded order, and a clip's samples come ``clip_stride``
    batches apart, so the worker that gets them (where ``num_workers`` divides
    ``clip_stride``) decodes the clip once instead of once a sample (``rayform.order.lanes``,
    as the streaming dataset orders a window). So ``seed`` and ``set_epoch(e)`` determine which
    sample every index returns, in every process: under a deterministic sampler
    (``DistributedSampler``, ``shuffle=False``, or a seeded ``generator``) the same slice,
    seed and epoch give the same samples in the same order, and each epoch a new order even
    if the sampler's own epoch is never set. ``set_epoch`` reaches forked and persistent
    workers (the epoch lives in shared memory).

    ``slice_`` may be a weighted mixture ``[(slice, weight), ...]``: each epoch draws exactly
    ``round(w_i·N)`` samples from part ``i`` (``N`` = the parts' sizes summed), in an order
    that is a pure function of (parts, weights, seed, epoch); ``meta["part"]`` names the part.
    The sample comes as one :class:`SampleSpec` (``spec``), or as its keywords (``obs=``,
    ``action=``, ``fps=``, …: ``SampleSpec.of``). The pack read is the one that serves the spec
    (``rayform.torch.pack_choice``), or the one ``pack=`` names; if the slice has none at
    ``fps``, a single process with a writable store packs it (a progress bar and one log line);
    elsewhere it is an error naming the command to run. Remote shards are fetched
    whole into the shard cache of the slice's store (``Client(store, cache=...)``) on first
    use and read by offset.

    ``dataset.stats`` holds the pack's statistics per array stream; ``normalize={"action":
    "min_max", "joints/position": "mean_std"}`` normalizes those keys of every sample
    (``"mean_std"``, ``"min_max"`` or ``"quantile"``: see ``rayform.sample.normalize``), and
    ``dataset.unnormalize(action)`` inverts it.

    ``resize=(H, W)`` gives every image at that size, decoded there: a JPEG through
    libjpeg-turbo's DCT scaling to the smallest of its M/8 scales at least that large (for
    half the size, a quarter of the pixels decoded), then resized bilinearly the rest of the
    way (``rayform.codec.imagecodec.decode_resized``). The pack is unchanged; to store smaller
    images once instead, pack with ``--resize``.
    """

    @raised_here
    def __init__(self, slice_: Mixture, spec: SampleSpec | None = None, *, seed: int = 0,
                 batch_size: int | None = None, clip_stride: int = 2,
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None, **sample: Any):
        self.parts = Parts(slice_, SampleSpec.given(spec, sample))
        self._normalize()
        self.readers = [PackReader(s.store, b.pack, b.members, whole_shards=False) for s, b in self.parts]
        self._batch = BatchLayout(self.builders[0])
        self.seed = check_seed(seed)
        self._perm: Permutation | LanePermutation | MixtureOrder | None = None
        self._perm_epoch = -1
        self.batch_size: int | None = None
        self.clip = 0
        self.order_in_batches(batch_size, clip_stride)
        self.transform = transform
        self._epoch_in_shared_memory()
        self._hinted = not any(s.video is not None for s in self.builders[0].pack.schema.values())

    def __repr__(self) -> str:
        return (f"EpisodeDataset({self.slice_id}, fps={self.pack.fps:g}, samples={len(self)}, "
                f"obs={list(self.parts.spec.obs)}, action={self.parts.spec.actions()!r})")

    def __len__(self) -> int:
        return len(self.parts)

    def order_in_batches(self, batch_size: int | None, clip_stride: int = 2) -> None:
        """Read in batches of ``batch_size`` indices in order (``None``: any order): on a video
        pack, index ``i`` is then the clip-aware order's (see the class; ``ClipBatchSampler``
        calls it). Before reading: the order of every index changes."""
        self.batch_size = check_batch_size(batch_size)
        self.clip_stride = ShuffleConfig(clip_stride=clip_stride).clip_stride
        self.clip = self._clip_frames()
        if self.clip:
            assert self.batch_size is not None
            for builder in self.builders:  # the lanes bring a clip's other samples soon after
                builder.read_in_lanes(self.batch_size * self.clip_stride)
        self._perm, self._perm_epoch = None, -1

    def set_epoch(self, epoch: int) -> None:
        """Make index ``i`` return sample ``P(seed, epoch)[i]`` from now on, in every worker."""
        self._epoch[0] = int(epoch)

    def sample_ids(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Which pack samples these dataset indices return at the current epoch (one slice)."""
        parts, ids = self.locate(indices)
        return ids

    def locate(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(part, sample of that part's pack)`` of each dataset index at the current epoch."""
        epoch = self.epoch
        if self._perm is None or self._perm_epoch != epoch:
            self._perm_epoch = epoch
            weights = self.parts.weights
            if weights is not None:
                self._perm = MixtureOrder([b.pack.samples for b in self.builders], weights, self.seed, epoch)
            elif self.clip and self.batch_size is not None:
                self._perm = LanePermutation(len(self), self.batch_size, self.clip_stride, self.seed, epoch, 0,
                                             self.clip)
            else:
                self._perm = Permutation(len(self), self.seed, epoch)
        wanted = np.asarray(indices, np.int64)
        if isinstance(self._perm, MixtureOrder):
            return self._perm.lookup(wanted)
        return np.zeros(len(wanted), np.int64), self._perm(wanted)

    def _clip_frames(self) -> int:
        """Samples a clip of this dataset's video pack (0: not one slice's video pack, or no
        batch size to order its clips by)."""
        if self.batch_size is None or self.parts.weights is not None:
            return 0
        videos = [s.video for s in self.builders[0].pack.schema.values() if s.video is not None]
        return videos[0].clip_frames if videos else 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> Sequence[dict[str, Any]]:
        """A batch of samples, read in shard order for locality, returned in the asked order
        (filled whole into one batch buffer: ``rayform.torch.batch``)."""
        parts, ids = self.locate(indices)
        raws: list[Any] = [None] * len(ids)
        keys: list[str] = [""] * len(ids)
        for p in np.unique(parts).tolist():
            rows = np.flatnonzero(parts == p)
            reader = self.readers[p]
            order = rows[np.argsort(reader.shard_of(ids[rows]), kind="stable")].tolist()
            for j, (key, raw) in zip(order, reader.raw_many(ids[order])):
                raws[j], keys[j] = raw, key
        buf = self._batch.buffer(len(ids))
        out = self._batch.samples(buf, self.parts.fill(buf.rows, parts.tolist(), raws, keys), self.transform)
        if not self._hinted:
            self._hint_clip_order()
        return out

    def _hint_clip_order(self) -> None:
        """Once a process: a video pack read in an order that decodes most of a clip for each
        sample (a shuffling sampler) is told how to read it a clip at a time."""
        clips = self.builders[0].clips
        if clips.built < HINT_AFTER:
            return
        self._hinted = True
        # a clip-aware order's lanes each decode a group of pictures before their first sample
        spec = self.builders[0].pack.spec
        ahead = self.batch_size * self.clip_stride * spec.group_frames() if self.clip and self.batch_size else 0
        if clips.decoded - ahead > 2 * clips.built:
            log.warning("rayform: this video pack is read in an order that decodes %.1f frames a sample; give "
                        "EpisodeDataset(..., batch_size=<the DataLoader's>) and the DataLoader no shuffle (the dataset "
                        "shuffles), or the DataLoader batch_sampler=rayform.torch.ClipBatchSampler(dataset, <batch size>, "
                        "num_workers=<its workers>): each clip is then decoded once", clips.decoded / clips.built)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_perm"] = None
        return state
