"""``EpisodeDataset``: a map-style dataset over a slice's pack, with random access by offset."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from rayform.errors import raised_here
from rayform.order.mixture import MixtureOrder, epoch_size
from rayform.pack import Pack
from rayform.permutation import Permutation
from rayform.read.reader import PackReader
from rayform.recordings.slices import Slice
from rayform.sample.builder import SampleSpec
from rayform.torch.batch import BatchLayout
from rayform.torch.sources import mixture_parts, open_parts, sample_spec
from rayform.torch.statistics import Normalization


class EpisodeDataset(Normalization, Dataset[dict[str, Any]]):
    """Time-aligned samples of a slice, served from its pack at ``fps``.

    ``obs`` names the streams each sample carries (images as ``(3, H, W) uint8``, arrays as
    ``float32``); ``action`` is an array stream (its future values) or ``<stream>_delta``
    (future minus current), ``horizon`` steps long, or a pose stream (``rotation``: ``"quat"``,
    ``"rot6d"``, ``"axis_angle"``) or ``<pose>_delta`` (the relative transform), or a list of
    these concatenated on the last axis (``dataset.action_names`` names every element; see
    ``rayform.sample.action``); ``frame`` re-expresses pose streams in ``"ros"``, ``"optical"``
    or ``"opengl"`` axes (None: as recorded).

    Order: index ``i`` of epoch ``e`` is sample ``P(seed, e)[i]`` of the pack, where ``P`` is
    a fixed pseudo-random permutation. So ``seed`` and ``set_epoch(e)`` determine which
    sample every index returns, in every process: under a deterministic sampler
    (``DistributedSampler``, ``shuffle=False``, or a seeded ``generator``) the same slice,
    seed and epoch give the same samples in the same order, and each epoch a new order even
    if the sampler's own epoch is never set. ``set_epoch`` reaches forked and persistent
    workers (the epoch lives in shared memory).

    ``slice_`` may be a weighted mixture ``[(slice, weight), ...]``: each epoch draws exactly
    ``round(w_i·N)`` samples from part ``i`` (``N`` = the parts' sizes summed), in an order
    that is a pure function of (parts, weights, seed, epoch); ``meta["part"]`` names the part.
    The sample arguments may come as one :class:`SampleSpec` in ``obs``. If the slice has no
    pack at ``fps``, a single process with a writable store packs it (a progress bar and one
    log line); elsewhere it is an error naming the command to run. Remote shards are fetched
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
    def __init__(
        self,
        slice_: Slice | Sequence[tuple[Slice, float]],
        obs: str | Sequence[str] | SampleSpec,
        action: str | Sequence[str] | None = None,
        fps: float = 15,
        horizon: int = 16,
        frame: str | None = None,
        *,
        seed: int = 0,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        normalize: Mapping[str, str] | None = None,
        rotation: str | None = None,
        history: Mapping[str, int | Sequence[float]] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        resize: tuple[int, int] | None = None,
        pack: str | Pack | None = None,
    ):
        slices, self.weights = mixture_parts(slice_)
        self.builders = open_parts(slices, sample_spec(obs, action, fps, horizon, frame, rotation, history,
                                                         delta_timestamps, resize, pack))
        self._normalize(normalize)
        self.readers = [PackReader(s.store, b.pack, b.members, whole_shards=False)
                        for s, b in zip(slices, self.builders)]
        self.builder, self.reader = self.builders[0], self.readers[0]
        self.pack = self.builder.pack
        self.slice_id = slices[0].id if self.weights is None else "+".join(s.id for s in slices)
        self._batch = BatchLayout(self.builder)
        self.seed = int(seed)
        self.transform = transform
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._perm: Permutation | MixtureOrder | None = None
        self._perm_epoch = -1

    @property
    def action_names(self) -> list[str]:
        """The action's elements, one per value of its last axis (``rayform.sample.action``)."""
        return self.builder.action_names

    def __repr__(self) -> str:
        return (f"EpisodeDataset({self.slice_id}, fps={self.pack.fps:g}, samples={len(self)}, "
                f"obs={list(self.builder.spec.obs)}, action={self.builder.spec.action!r})")

    def __len__(self) -> int:
        return epoch_size([b.pack.samples for b in self.builders], self.weights)

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

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
            self._perm = (Permutation(len(self), self.seed, epoch) if self.weights is None else
                          MixtureOrder([b.pack.samples for b in self.builders], self.weights, self.seed, epoch))
        wanted = np.asarray(indices, np.int64)
        if isinstance(self._perm, MixtureOrder):
            return self._perm.lookup(wanted)
        return np.zeros(len(wanted), np.int64), self._perm(wanted)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> Sequence[dict[str, Any]]:
        """A batch of samples, read in shard order for locality, returned in the asked order
        (filled whole into one batch buffer: ``rayform.torch.batch``)."""
        parts, ids = self.locate(indices)
        buf = self._batch.buffer(len(ids))
        metas: list[Any] = [None] * len(ids)
        for p in np.unique(parts).tolist():
            rows = np.flatnonzero(parts == p)
            reader, builder = self.readers[p], self.builders[p]
            order = rows[np.argsort(reader.shard_of(ids[rows]), kind="stable")].tolist()
            read = reader.raw_many(ids[order])
            made = builder.fill([raw for _, raw in read], [key for key, _ in read], buf.rows, order)
            for j, meta in zip(order, made):
                if self.weights is not None:
                    meta["part"] = p
                metas[j] = meta
        return self._batch.samples(buf, metas, self.transform)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_perm"] = None
        return state
