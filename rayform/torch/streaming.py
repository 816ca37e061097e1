"""``StreamingEpisodeDataset``: the same samples as ``EpisodeDataset``, streamed shard by shard."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset

from rayform.errors import IntegrityError, InvalidInput
from rayform.read import order, partition, runs
from rayform.read.mixture import MixtureOrder
from rayform.read.reader import PackReader
from rayform.read.sample import SampleSpec
from rayform.recordings.slices import Slice
from rayform.store.cached import CachedStore
from rayform.store.fetch import Retry
from rayform.torch.batch import (
    BatchBuffer,
    Sample,
    collate_samples,
    default_collate_fn_map,
)
from rayform.torch.packsource import mixture_parts, open_parts, sample_spec
from rayform.torch.tensors import to_torch
from rayform.torch.world import Split, World

log = logging.getLogger("rayform")

# Builds one sample: into the given rows of a batch buffer, or into fresh arrays (None).
Build = Callable[[Mapping[str, np.ndarray] | None], dict[str, Any]]


@dataclass(frozen=True)
class ShuffleConfig:
    """The shuffle buffer: ``buffer`` samples (0 or 1: none), filled to ``initial`` before the
    first is drawn. Its seed is the dataset's ``seed``."""

    buffer: int = 1000
    initial: int = 100

    def __post_init__(self) -> None:
        for name in ("buffer", "initial"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 24:
                raise InvalidInput(f"ShuffleConfig {name} {value!r}: a whole number of samples, 0..{1 << 24}")


class StreamingEpisodeDataset(IterableDataset[dict[str, Any]]):
    """Streams a slice's pack at ``fps`` straight from its store (``s3://``, ``gs://``, local…).

    Takes the same slice (or weighted mixture of slices) and sample parameters as
    :class:`EpisodeDataset` and yields the very same sample dicts (one builder makes both).
    Each epoch (``set_epoch``):

    - the shards are put in an order seeded by (seed, epoch), and split into consecutive
      runs per rank (``torch.distributed`` when initialised, or ``Split(rank, world_size)``)
      and per DataLoader worker, so every sample is read exactly once across all ranks and
      workers, and every rank yields ``len(self)`` samples (``Split(equalize=...)``: "pad"
      repeats the first samples of the epoch's order to fill the last ranks, "drop" leaves
      out the tail);
    - each reader cuts its shards' samples by the pack's offset index (no tar parsing), as
      they arrive or from the cache, through webdataset's shuffle buffer (``ShuffleConfig``,
      seeded by (seed, epoch, rank, worker)), then the sample builder;
    - what is streamed is written into the shard cache and verified at each shard's end,
      so the next epoch reads from disk (``RAYFORM_OFFLINE=1`` holds here too);
    - a dropped connection or 5xx is retried and resumed at the byte where it stopped.

    The same seed, epoch, world size and worker count give the same order in a new
    process. ``state_dict()``/``load_state_dict()`` resume an epoch after an interruption
    without repeating or skipping a sample (in the reading process: the main process, or
    each worker under torchdata's ``StatefulDataLoader``).

    ``batch_size``: yield whole batches instead of samples (use ``DataLoader(batch_size=None)``):
    each batch is decoded straight into one buffer, with no collation copy; ``len()`` then
    counts samples still. The last batch of each reader may be smaller.

    Pick it over ``EpisodeDataset`` for slices larger than local disk, or to start
    training before a slice has been fetched: reads are sequential, one shard at a time.
    """

    def __init__(
        self,
        slice_: Slice | Sequence[tuple[Slice, float]],
        obs: str | Sequence[str] | SampleSpec,
        action: str | None = None,
        fps: float = 15,
        horizon: int = 16,
        frame: str | None = None,
        *,
        seed: int = 0,
        shuffle: ShuffleConfig = ShuffleConfig(),
        split: Split = Split(),
        retry: Retry = Retry(),
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        batch_size: int | None = None,
    ):
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise InvalidInput(f"batch_size {batch_size!r}: a whole number, at least 1 (or None for samples)")
        for name, value, kind in (("shuffle", shuffle, ShuffleConfig), ("split", split, Split), ("retry", retry, Retry)):
            if not isinstance(value, kind):
                raise InvalidInput(f"{name} {str(value)[:60]!r}: give a rayform.torch.{kind.__name__}(...)")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidInput(f"seed {str(seed)[:40]!r}: a whole number")
        slices, self.weights = mixture_parts(slice_)
        self.builders = open_parts(slices, sample_spec(obs, action, fps, horizon, frame))
        self.builder = self.builders[0]
        self.pack = self.builder.pack
        for s, b in zip(slices, self.builders):
            if b.pack.spec.interleave_seed is None and len(b.pack.shards) > 1:
                log.warning("rayform: %s: its pack at %g fps is in time order, so streamed batches hold few episodes. "
                            "For an interleaved one run: rayform pack %s --fps %g", s.id, b.pack.fps, s.id, b.pack.fps)
        self.slice_id = slices[0].id if self.weights is None else "+".join(s.id for s in slices)
        self.seed = seed
        self.shuffle = shuffle
        self.equalize = split.equalize
        self.retry = retry
        self.transform = transform
        self.batch_size = batch_size
        rank, world_size = split.rank, split.world_size
        if rank is None or world_size is None:
            # DataLoader workers do not see the process group: take the rank where it is known.
            here = World.detect()
            rank, world_size = here.rank, here.world_size
        self._explicit = (rank, world_size)
        # one reader per part; each reopens its store and files after a fork
        self._pack_readers = [PackReader(s.store, b.pack, b.pack.members) for s, b in zip(slices, self.builders)]
        self._pack_reader = self._pack_readers[0]
        for s, reader in zip(slices, self._pack_readers):
            if not s.store.offline:
                # The offset index and the chunk digests (small) join the cache here, once: workers
                # then start on their first shard at once, and cached epochs read by offset (offline too).
                _ = reader.index
                reader.chunk_digests()
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._yielded = 0
        self._resume_at = 0

    def __repr__(self) -> str:
        return f"StreamingEpisodeDataset({self.slice_id}, fps={self.pack.fps:g}, samples/rank={len(self)})"

    # -- topology and order ------------------------------------------------------------
    def world(self) -> World:
        return World.detect(*self._explicit)

    def __len__(self) -> int:
        """Samples each rank yields per epoch (also with ``batch_size``: an upper bound on batches)."""
        world = World.detect(*self._explicit)
        return partition.per_rank(sum(b.pack.samples for b in self.builders), world.world_size, self.equalize)

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        """Seeds this epoch's shard order and shuffle; reaches forked and persistent workers."""
        self._epoch[0] = int(epoch)
        self._yielded = self._resume_at = 0

    def runs(self, world: World, epoch: int) -> list[partition.Run]:
        return partition.runs_for([s.samples for s in self.pack.shards], world.rank, world.world_size,
                                  world.worker, world.workers, self.seed, epoch, self.equalize)

    # -- resumption ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "yielded": self._yielded, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("seed", self.seed) != self.seed:
            raise InvalidInput(f"state_dict: saved with seed {state['seed']}, this dataset has {self.seed}. "
                               "Make the dataset with the seed of the run it resumes")
        self._epoch[0] = int(state["epoch"])
        self._yielded = self._resume_at = int(state["yielded"])

    # -- reading -------------------------------------------------------------------------
    @property
    def store(self) -> CachedStore:
        """The (first) slice's store, opened in this process (never a handle of the parent's)."""
        return self._pack_reader.store

    def raw_samples(self, world: World | None = None) -> Iterator[dict[str, Any]]:
        """This reader's raw samples for the epoch, shuffled, before any decoding."""
        import webdataset as wds

        world = world or self.world()
        epoch = self.epoch
        if self.weights is None:
            src = runs.run_samples(self.runs(world, epoch), self.pack, self.store, self._pack_reader, self.retry)
        else:
            src = self._mixed(world, epoch)
        if self.shuffle.buffer > 1:
            rng = order.reader_rng(self.seed, epoch, world.rank, world.worker)
            src = wds.filters.shuffle(self.shuffle.buffer, self.shuffle.initial, rng=rng)(src)
        return runs.skip(src, self._resume_at)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # Counted per iteration, where it runs: a persistent DataLoader worker never sees
        # set_epoch (only the shared epoch), so its count must not run on from the last epoch.
        self._yielded = self._resume_at
        samples = self._samples()
        if self.batch_size is None:
            for _, build in samples:
                yield self._finish(build(None))
        else:
            yield from self._batches(samples)
        self._resume_at = 0

    def _mixed(self, world: World, epoch: int) -> Iterator[dict[str, Any]]:
        """A mixture's raw samples for this reader: its consecutive slots of the epoch, each part
        read as a consecutive range of that part's own order of shards (see ``read.mixture``)."""
        sizes = [b.pack.samples for b in self.builders]
        mix = MixtureOrder(sizes, self.weights or [], self.seed, epoch)
        count = partition.per_rank(mix.total, world.world_size, self.equalize)
        lo, hi = partition.worker_span(count, world.workers, world.worker)
        start, stop = world.rank * count + lo, world.rank * count + hi
        while start < stop:  # padding wraps round to the epoch's first slots
            a = start % mix.total
            b = min(mix.total, a + stop - start)
            parts = mix.parts_of(np.arange(a, b))
            first = mix.before(a)
            streams = []
            for p, (builder, reader) in enumerate(zip(self.builders, self._pack_readers)):
                shards = np.array([s.samples for s in builder.pack.shards], np.int64)
                mine = partition.shard_order(len(shards), self.seed ^ (p + 1), epoch)
                n = int((parts == p).sum())
                got = partition.runs_between(shards, mine, int(first[p]), int(first[p]) + n)
                streams.append(runs.run_samples(got, builder.pack, reader.store, reader, self.retry))
            for p in parts.tolist():
                raw = next(streams[p])
                raw["__part__"] = p
                yield raw
            for rest in streams:  # each part's stream ends here: its last shard is verified and kept
                for _ in rest:
                    raise AssertionError("a mixture part gave more samples than its slots")
            start += b - a

    def _samples(self) -> Iterator[tuple[dict[str, Any], Build]]:
        """Each raw sample with a function that builds it (into given rows, or fresh arrays)."""
        shard_of = [{s.sha256: i for i, s in enumerate(b.pack.shards)} for b in self.builders]
        for raw in self.raw_samples():
            def build(into: Mapping[str, np.ndarray] | None, raw: dict[str, Any] = raw) -> dict[str, Any]:
                p: int = raw.get("__part__", 0)
                try:
                    values: dict[str, Any] = self.builders[p].build(raw, raw["__key__"], into)
                except IntegrityError as e:  # verified bytes, malformed content: the pack itself is bad
                    digest = raw["__url__"].rsplit("#", 1)[0]
                    raise type(e)(
                        f"{self.builders[p].pack.slice_id}: shard {shard_of[p].get(digest)} ({digest[:16]}) of "
                        f"{self._pack_readers[p].store.display}: {e}"
                    ) from e
                if self.weights is not None:
                    values["meta"]["part"] = p
                return values

            self._yielded += 1
            yield raw, build

    def _finish(self, values: dict[str, Any], buf: BatchBuffer | None = None, row: int = -1) -> dict[str, Any]:
        sample = Sample(to_torch(values), buf, row) if buf is not None else to_torch(values)
        return self.transform(sample) if self.transform else sample

    def _batches(self, samples: Iterator[tuple[dict[str, Any], Build]]) -> Iterator[dict[str, Any]]:
        layout = self.builder.layout()
        images = {s.name for s in self.builder.images}
        pending: list[tuple[dict[str, Any], Build]] = []
        for item in samples:
            pending.append(item)
            if len(pending) == self.batch_size:
                yield self._collate(pending, layout, images)
                pending = []
        if pending:
            yield self._collate(pending, layout, images)

    def _collate(self, items: list[tuple[dict[str, Any], Build]], layout: list[tuple[str, tuple[int, ...], np.dtype[Any]]],
                 images: set[str]) -> dict[str, Any]:
        buf = BatchBuffer(layout, len(items), images)
        return collate_samples([self._finish(build(buf.slots(j)), buf, j) for j, (_, build) in enumerate(items)],
                               collate_fn_map=default_collate_fn_map)

