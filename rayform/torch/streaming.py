"""``StreamingEpisodeDataset``: the same samples as ``EpisodeDataset``, streamed shard by shard."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from torch.utils.data import IterableDataset

from rayform.cache.store_view import CachedStore
from rayform.errors import IntegrityError, InvalidInput, raised_here
from rayform.order import partition
from rayform.order.epoch import EpochOrder
from rayform.order.partition import EpochPlan
from rayform.read.steps import read_steps
from rayform.sample.spec import SampleSpec
from rayform.torch.batch import BatchLayout, collate_samples, default_collate_fn_map
from rayform.torch.parts import Mixture, OverParts, Parts, check_seed, stream_readers
from rayform.torch.statistics import Statistics
from rayform.torch.tensors import to_torch
from rayform.torch.world import Split, World, nodes

T = TypeVar("T")
LANE_CLIPS = 8  # a lane of a video pack's window reads about this many groups of pictures, one after another
MAX_CLIP_STRIDE = 64  # global batches between a clip's samples, at most (a worker holds that many batches' clips)
SAMPLE_STEP = 64  # a rank's samples a step, in sample mode on a video pack (``step_samples``)

log = logging.getLogger("rayform")


@dataclass(frozen=True)
class ShuffleConfig:
    """Within each partition of an epoch, consecutive windows of ``window`` samples are
    permuted (0 or 1: read in the epoch's order), after a ramp of windows of one, two, four …
    global batches' share of the partition (so a stream starts on its first shards' first
    samples: ``rayform.order.partition``). Seeded by the dataset's ``seed``.

    A video pack's windows are permuted in lanes instead (``rayform.order.lanes``): each batch
    takes its samples from as many clips, and a clip's samples come ``clip_stride`` global
    batches apart, so that each clip is decoded by one DataLoader worker where the number of
    workers divides ``clip_stride`` (1 or 2 workers with the default; set it to your
    ``num_workers``, and keep it when resuming: it is part of the order)."""

    window: int = 1000
    clip_stride: int = 2

    def __post_init__(self) -> None:
        value = self.window
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 24:
            raise InvalidInput(f"ShuffleConfig window {value!r}: a whole number of samples, 0..{1 << 24}")
        stride = self.clip_stride
        if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= MAX_CLIP_STRIDE:
            raise InvalidInput(f"ShuffleConfig clip_stride {stride!r}: a whole number of global batches, "
                               f"1..{MAX_CLIP_STRIDE}")


def given(value: T, kind: type[T], name: str) -> T:
    if not isinstance(value, kind):
        raise InvalidInput(f"{name} {str(value)[:60]!r}: give a rayform.torch.{kind.__name__}(...)")
    return value


def check_batch_size(batch_size: object) -> int | None:
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise InvalidInput(f"batch_size {batch_size!r}: a whole number, at least 1 (or None for samples)")
    return batch_size


class StreamingEpisodeDataset(Statistics, OverParts, IterableDataset[dict[str, Any]]):
    """Streams a slice's pack at ``fps`` straight from its store (``s3://``, ``gs://``, local…).

    Takes the same slice (or weighted mixture of slices) and sample parameters as
    :class:`EpisodeDataset` and yields the very same sample dicts (one builder makes both).

    Each epoch (``set_epoch``) is a sequence of global batches of ``G`` = ``batch_size`` ×
    world size samples (one sample per rank in sample mode), a pure function of the slices,
    weights, ``seed``, epoch and ``Split(partitions=P)`` (by default the nodes): the epoch's order lays each pack's
    shards out in an order seeded by (seed, epoch) and is cut into ``P`` canonical partitions,
    each a stretch of a few shards permuted in windows (``ShuffleConfig``); every global batch
    takes its share of each partition (``rayform.order.partition``). A rank (``torch.distributed``
    when initialised, or ``Split(rank, world_size)``) takes its consecutive slots of every
    global batch, reading only the partitions they fall in; DataLoader worker ``w`` of ``n``
    makes the rank's batches ``w, w+n, …``. So with ``batch_size``, the global batches (over
    the ranks in rank order) are the same at every world size and worker count, and a run
    resumes at another one (``state_dict``). Every rank yields ``len(self)`` samples per epoch
    (``Split(equalize=...)``: "pad" repeats samples drawn from the epoch to fill the last global
    batch, "drop" leaves out the part of one).

    Shards are fetched into the shard cache a few ahead of use (verified chunk by chunk and
    whole, resumed at the byte where a connection dropped, throttling waited out as the
    store's ``Retry`` says: ``Client(retry=...)``), then read by offset, so the next epoch reads
    from disk (``RAYFORM_OFFLINE=1`` holds here too) and the cache can hold a slice larger than
    its limit (``Client(cache_limit=...)``).

    ``batch_size``: yield whole batches instead of samples (use ``DataLoader(batch_size=None)``):
    each batch is decoded straight into one buffer, with no collation copy; ``len()`` counts
    samples still. Needed for a sequence that holds across topologies: in sample mode the
    DataLoader's batch size is not known here, so the sequence holds across world sizes only
    with ``num_workers=0``.

    The sample (``spec``, or its keywords), ``stats``, ``normalize=``, ``unnormalize``, ``resize=``
    and ``pack=`` as on :class:`EpisodeDataset`.

    Pick it over ``EpisodeDataset`` for slices larger than local disk, or to start
    training before a slice has been fetched.
    """

    @raised_here
    def __init__(self, slice_: Mixture, spec: SampleSpec | None = None, *, seed: int = 0,
                 shuffle: ShuffleConfig = ShuffleConfig(), split: Split = Split(), batch_size: int | None = None,
                 transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None, **sample: Any):
        self.parts = Parts(slice_, SampleSpec.given(spec, sample))
        self._normalize()
        self.seed = check_seed(seed)
        self.shuffle, split = given(shuffle, ShuffleConfig, "shuffle"), given(split, Split, "split")
        self.batch_size = check_batch_size(batch_size)
        self.transform = transform
        self.equalize = split.equalize
        self.partitions = split.partitions or nodes()
        self._partitions_given = split.partitions is not None
        self._explicit = split.where()
        self._pack_readers = stream_readers(self.parts)  # one per part; each reopens its store after a fork
        self._batch = BatchLayout(self.builders[0])
        for builder in self.builders:  # the lanes bring a clip's other samples soon after
            builder.read_in_lanes(self.step_samples * self.shuffle.clip_stride)
        self._epoch_in_shared_memory()
        if self.batch_size is None and any(b.pack.has_video for b in self.builders):
            # measured: sample by sample, a video pack reads at half the rate, twice the CPU a sample
            log.warning("rayform: %s is a video pack read sample by sample, at about half the rate of whole "
                        "batches; give StreamingEpisodeDataset(..., batch_size=<the DataLoader's>) and "
                        "DataLoader(dataset, batch_size=None)", self.pack.key)
        self._next = 0  # the next step this reader makes
        self._resume: tuple[int, int | None] = (0, None)  # (step, the worker whose state it is)

    def __repr__(self) -> str:
        return f"StreamingEpisodeDataset({self.slice_id}, fps={self.pack.fps:g}, samples/rank={len(self)})"

    # -- topology and order ------------------------------------------------------------
    def world(self) -> World:
        return World.detect(*self._explicit)

    @property
    def step_samples(self) -> int:
        """Samples a rank reads a step: ``batch_size``; in sample mode 1, but ``SAMPLE_STEP`` on a
        video pack, whose lanes need a batch's width to mix: the DataLoader's batches, cut from
        a worker's run of samples, are then as mixed as the dataset's own."""
        if self.batch_size is not None:
            return self.batch_size
        return SAMPLE_STEP if any(b.pack.has_video for b in self.builders) else 1

    @property
    def global_batch(self) -> int:
        """Samples in one global batch: ``step_samples`` × world size."""
        return self.step_samples * self.world().world_size

    def order(self, epoch: int) -> EpochOrder:
        sizes = [[s.samples for s in b.pack.shards] for b in self.builders]
        return EpochOrder(sizes, self.weights, self.seed, epoch)

    def plan(self, epoch: int, global_batch: int | None = None) -> EpochPlan:
        """The epoch's global batches (``order.partition``)."""
        specs = [b.pack.spec for b in self.builders if b.pack.has_video]
        # a lane reads about LANE_CLIPS groups of pictures: clips of 8, or one clip of 64 with history
        lanes = (self.shuffle.clip_stride, max(specs[0].clip_frames, LANE_CLIPS * specs[0].keyframe_every),
                 specs[0].clip_frames) if specs else None
        return EpochPlan(len(self.parts), global_batch or self.global_batch, self.partitions, self.shuffle.window,
                         self.seed, epoch, self.equalize, lanes)

    def __len__(self) -> int:
        """Samples each rank yields per epoch (with ``batch_size``: ``len // batch_size`` batches)."""
        return self.plan(self.epoch).steps * self.step_samples

    def set_epoch(self, epoch: int) -> None:
        """Seeds this epoch's order; reaches forked and persistent workers."""
        self._epoch[0] = int(epoch)
        self._next, self._resume = 0, (0, None)

    # -- resumption ----------------------------------------------------------------------
    def state_dict(self, step: int | None = None) -> dict[str, int]:
        """Where this epoch stands, as plain data.

        ``step``: the global batches the run has consumed this epoch (what a training loop
        counts): the state resumes at any world size and worker count, the global batch kept.
        Without it, this reader's own place: the main process's with ``num_workers=0``, or each
        worker's under torchdata's ``StatefulDataLoader`` (which resumes the same topology)."""
        here = self.world()
        state = {"epoch": self.epoch, "seed": self.seed, "partitions": self.partitions,
                 "global_batch": self.global_batch, "order": partition.ORDER}
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, int) or step < 0:
                raise InvalidInput(f"state_dict step {step!r}: the number of global batches consumed, at least 0")
            return {**state, "step": step}
        if here.workers > 1:
            return {**state, "step": self._next, "worker": here.worker, "workers": here.workers}
        return {**state, "step": self._next}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if not self._partitions_given and isinstance(state.get("partitions"), int) and state["partitions"] >= 1:
            self.partitions = state["partitions"]  # the run's own, kept when it resumes on other nodes
        for key, mine in (("seed", self.seed), ("partitions", self.partitions), ("global_batch", self.global_batch)):
            if key in state and state[key] != mine:
                fix = {"seed": "Make the dataset with the seed of the run it resumes",
                       "partitions": f"Make the dataset with Split(partitions={state[key]}), or leave it out",
                       "global_batch": "Keep batch_size × world size as it was (e.g. double batch_size on half the ranks)",
                       }[key]
                raise InvalidInput(f"state_dict: saved with {key} {state[key]}, this dataset has {mine}. {fix}")
        if "step" not in state:
            raise InvalidInput(f"state_dict {sorted(state)}: not a state of a StreamingEpisodeDataset (no 'step')")
        # a state without "order" was saved before it was written down: read as order 2. Where
        # the epoch has no padding, order 4 is this one, and 2 and 3 too for a pack without video
        order = state.get("order", 2)
        plan = self.plan(int(state.get("epoch", 0)))
        video = any(b.pack.has_video for b in self.builders)
        same = not plan.padded and (order == 4 or not video and order in (2, 3))
        if order != partition.ORDER and not same:
            raise InvalidInput(f"state_dict: saved under epoch order {order!r}, this rayform makes order "
                               f"{partition.ORDER}: resume with the rayform version that saved it, or start the "
                               "epoch over (state_dict(step=0) of the same epoch)")
        here = self.world()
        worker = state.get("worker")
        if worker is not None and (state.get("workers") != here.workers or worker != here.worker):
            raise InvalidInput(f"state_dict: a state of DataLoader worker {worker} of {state.get('workers')}, loaded "
                               f"in worker {here.worker} of {here.workers}. To resume with another number of "
                               "workers, save dataset.state_dict(step=<global batches consumed>)")
        self._epoch[0] = int(state["epoch"])
        self._resume = (int(state["step"]), worker)
        self._next = int(state["step"])

    # -- reading -------------------------------------------------------------------------
    @property
    def store(self) -> CachedStore:
        """The (first) slice's store, opened in this process (never a handle of the parent's)."""
        return self._pack_readers[0].store

    def raw_steps(self, world: World | None = None) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """This reader's steps this epoch, each with its raw samples (before any decoding)."""
        world = world or self.world()
        epoch = self.epoch
        batch = self.step_samples
        plan = self.plan(epoch, batch * world.world_size)
        first, worker_of_state = self._resume
        # a worker's own state names its next step; a global one, the first step not consumed
        first = first if worker_of_state is not None else first + world.worker
        steps = range(first, plan.steps, world.workers)
        return read_steps(self._pack_readers, self.order(epoch), plan, partition.rank_slots(world.rank, batch), steps)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        workers = self.world().workers
        for step, raws in self.raw_steps():
            # counted where it runs (a persistent DataLoader worker never sees set_epoch), and
            # before the yield: what the caller got is behind it
            if self.batch_size is not None:
                out = self._collate(raws)
                self._next = step + workers
                yield out
                continue
            for i, raw in enumerate(raws):  # sample mode: a step's samples one by one
                sample = self._finish(self._build(raw))
                if i == len(raws) - 1:
                    self._next = step + workers
                yield sample
        self._resume = (0, None)

    def _build(self, raw: dict[str, Any]) -> dict[str, Any]:
        p: int = raw["__part__"]
        with self._naming_shard([raw]):
            values: dict[str, Any] = self.builders[p].build(raw, raw["__key__"])
        if self.weights is not None:
            values["meta"]["part"] = p
        return values

    def _finish(self, values: dict[str, Any]) -> dict[str, Any]:
        sample = to_torch(values)
        return self.transform(sample) if self.transform else sample

    def _collate(self, raws: list[dict[str, Any]]) -> dict[str, Any]:
        buf = self._batch.buffer(len(raws))
        metas = self.parts.fill(buf.rows, [raw["__part__"] for raw in raws], raws, [raw["__key__"] for raw in raws],
                                self._naming_shard)
        return collate_samples(self._batch.samples(buf, metas, self.transform), collate_fn_map=default_collate_fn_map)

    @contextmanager
    def _naming_shard(self, raws: list[Mapping[str, Any]]) -> Iterator[None]:
        """An IntegrityError (verified bytes, malformed content: the pack itself is bad) names the
        shard of the sample it is about."""
        try:
            yield
        except IntegrityError as e:
            # which sample: the first of these that fails alone (only ever run on an error)
            bad = next((raw for raw in raws if self._fails(raw)), raws[0])
            p, shard = bad["__part__"], bad["__shard__"]
            digest = self.builders[p].pack.shards[shard].sha256
            raise type(e)(f"{self.builders[p].pack.slice_id}: shard {shard} ({digest[:16]}) of "
                          f"{self._pack_readers[p].store.display}: {e}") from e

    def _fails(self, raw: Mapping[str, Any]) -> bool:
        try:
            self.builders[raw["__part__"]].build(raw, raw["__key__"])
        except IntegrityError:
            return True
        return False
