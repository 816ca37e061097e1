"""What a dataset reads: one slice, or the parts of a weighted mixture ``[(slice, weight), ...]``,
each through the pack that serves the spec (``pack_choice``), by a sample builder of its own.
Every part's samples are laid out alike, so one batch buffer holds any of them; both datasets
fill their batches through ``Parts.fill``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch

from rayform.cache.store_view import CachedStore
from rayform.errors import InvalidInput, RayformError
from rayform.order.mixture import check_weights, epoch_size
from rayform.pack import Pack
from rayform.read.reader import PackReader
from rayform.recordings.slices import Slice
from rayform.sample.builder import SampleBuilder
from rayform.sample.spec import SampleSpec
from rayform.sizes import format_size
from rayform.torch.pack_choice import pack_for

log = logging.getLogger("rayform")
Mixture = Slice | Sequence[tuple[Slice, float]]


class OverParts:
    """Mixed into both datasets: what they read (``parts``), and their epoch, in shared memory
    so that forked and persistent DataLoader workers see ``set_epoch``."""

    parts: Parts
    _epoch: torch.Tensor

    def _epoch_in_shared_memory(self) -> None:
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    @property
    def builders(self) -> list[SampleBuilder]:
        return self.parts.builders

    @property
    def weights(self) -> list[float] | None:
        return self.parts.weights

    @property
    def pack(self) -> Pack:
        """The (first) part's pack."""
        return self.parts.pack

    @property
    def slice_id(self) -> str:
        return self.parts.slice_id

    @property
    def action_names(self) -> list[str]:
        """The action's elements, one per value of its last axis (``rayform.sample.action``)."""
        return self.builders[0].action_names


def check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidInput(f"seed {str(seed)[:40]!r}: a whole number")
    return seed


class Parts:
    """The parts a dataset reads (one slice: one part, weights None) and their sample builders."""

    def __init__(self, slices: Mixture, spec: SampleSpec):
        self.slices, self.weights = mixture_parts(slices)
        self.spec = spec
        self.builders = open_parts(self.slices, spec)

    @property
    def pack(self) -> Pack:
        """The (first) part's pack."""
        return self.builders[0].pack

    @property
    def slice_id(self) -> str:
        """The slice's id, or the parts' joined by ``+``."""
        return self.slices[0].id if self.weights is None else "+".join(s.id for s in self.slices)

    def __len__(self) -> int:
        """Samples in one epoch (a mixture: its parts of weight above 0, ``order.mixture``)."""
        return epoch_size([b.pack.samples for b in self.builders], self.weights)

    def fill(self, rows: Mapping[str, np.ndarray], parts: Sequence[int], raws: Sequence[Mapping[str, Any]],
             keys: Sequence[str], guard: Callable[[list[Mapping[str, Any]]], AbstractContextManager[None]] | None = None
             ) -> list[dict[str, Any]]:
        """Build sample ``j`` (``raws[j]`` of part ``parts[j]``, named ``keys[j]``) into row ``j`` of
        ``rows``, part by part; each sample's meta (a mixture's says its ``part``). ``guard``
        wraps each part's building (the streaming dataset names the shard of a bad sample)."""
        metas: list[dict[str, Any]] = [{}] * len(raws)
        for p in sorted(set(parts)):
            at = [j for j, q in enumerate(parts) if q == p]
            mine = [raws[j] for j in at]
            with (guard(mine) if guard is not None else nullcontext()):
                made = self.builders[p].fill(mine, [keys[j] for j in at], rows, at)
            for j, meta in zip(at, made):
                if self.weights is not None:
                    meta["part"] = p
                metas[j] = meta
        return metas

    def __iter__(self) -> Iterator[tuple[Slice, SampleBuilder]]:
        return iter(zip(self.slices, self.builders))


def open_samples(slice_: Slice, spec: SampleSpec) -> SampleBuilder:
    """The builder of ``spec``'s samples from the slice's pack that serves them."""
    episodes: dict[str, int] = {}
    for i, s in enumerate(slice_.segments):
        episodes.setdefault(s.id, i)
    return SampleBuilder(pack_for(slice_, spec), spec, episodes)


def mixture_parts(slices: Slice | Sequence[tuple[Slice, float]]) -> tuple[list[Slice], list[float] | None]:
    """One slice (weights None), or the parts of a weighted mixture ``[(slice, weight), ...]``."""
    if isinstance(slices, Slice):
        return [slices], None
    parts = list(slices) if isinstance(slices, Sequence) and not isinstance(slices, str) else []
    if not parts:
        raise InvalidInput(f"{str(slices)[:60]}: give a Slice, or a mixture [(slice, weight), ...]")
    for i, part in enumerate(parts):
        if not (isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], Slice)
                and isinstance(part[1], (int, float)) and not isinstance(part[1], bool)):
            raise InvalidInput(f"mixture part {i}: {str(part)[:60]} is not (slice, weight)")
    weights = [float(w) for _, w in parts]
    check_weights(weights)
    return [s for s, _ in parts], weights


def open_parts(slices: list[Slice], spec: SampleSpec) -> list[SampleBuilder]:
    """A builder per part; every part's samples must be laid out alike (one batch buffer)."""
    builders = []
    for i, s in enumerate(slices):
        try:
            builders.append(open_samples(s, spec))
        except RayformError as e:
            if len(slices) == 1:
                raise
            raise type(e)(f"mixture part {i}: {e.args[0] if e.args else e}") from None
        if builders[i].layout() != builders[0].layout():
            raise InvalidInput(f"mixture part {i} ({s.id}): its samples are {builders[i].layout()}, part 0's are "
                               f"{builders[0].layout()}. Pack the parts with the same streams and --resize")
    return builders


PRESIGNED = 1024  # shards whose read URLs a dataset signs when made (signing the first costs ~60 ms a process)


def stream_readers(parts: Parts) -> list[PackReader]:
    """A reader per part, for streaming: its pack's offset index and chunk digests (small) join
    the cache now, once, and its shards' read URLs are signed (where the store signs), so that
    DataLoader workers start on their first shards at once and cached epochs read by offset,
    offline too. A cache limit below the largest shard is refused here; a pack in time order
    is said to stream few episodes a batch."""
    readers = []
    for s, b in parts:
        check_cache_limit(s.store, b.pack)
        if b.pack.spec.interleave_seed is None and len(b.pack.shards) > 1:
            log.warning("rayform: %s: its pack at %g fps is in time order, so streamed batches hold few episodes. "
                        "For an interleaved one run: rayform pack %s --fps %g", s.id, b.pack.fps, s.id, b.pack.fps)
        reader = PackReader(s.store, b.pack, b.pack.members)
        if not s.store.offline:
            _ = reader.index
            reader.chunk_digests()
            reader.store.presign(info.sha256 for info in reader.pack.shards[:PRESIGNED])
        readers.append(reader)
    return readers


def check_cache_limit(store: CachedStore, pack: Pack) -> None:
    """A cache limit below the pack's largest shard cannot be kept: said when the dataset is made."""
    limit = store.cache.limit if store.cache is not None else None
    if limit is None or not pack.shards:
        return
    largest = max(range(len(pack.shards)), key=lambda k: pack.shards[k].bytes)
    size = pack.shards[largest].bytes
    if size > limit:
        raise InvalidInput(f"cache limit {format_size(limit)} is smaller than shard {largest} of {pack.slice_id} at "
                           f"{pack.fps:g} fps ({format_size(size)}, its largest). Raise the limit "
                           f"(RAYFORM_CACHE_LIMIT, cache_limit=) to a few shards, or pack with a smaller --shard-size")
