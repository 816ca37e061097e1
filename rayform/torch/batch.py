"""Batches without a collation copy: every value written straight into the batch's memory.

``EpisodeDataset.__getitems__`` (and the streaming dataset's batches) lay out per key a
``(B, ...)`` array in two allocations, the images in one and the small values in the other
(so a kept ``batch["t_ns"]`` never holds the images): inside a DataLoader worker the images
go in a recycled slot of the worker's shared-memory arena (``rayform.torch.arena``: only the
slot's number crosses to the main process, and the slot is reused once no tensor there uses
it), else in fresh shared memory. ``SampleBuilder.fill`` decodes the batch's images straight
into their rows and computes its other arrays together, in place. Without a transform the
dataset returns a :class:`BuiltBatch`, whose samples are made only if asked for; the default
collate (:class:`Sample` is registered in torch's ``default_collate_fn_map``) returns the
buffer's arrays as the batch, with no copy and no per-row dict: images come out
``(B, C, H, W)`` in channels-last memory format. A transform gets each sample as a
:class:`Sample` of views of its rows; whatever it (or a ``collate_fn`` of the user's)
replaced, or a batch assembled from other samples, is collated the ordinary way.

Why: on this kind of machine fresh memory costs about as much as decoding into it, and
the default path pays for it twice (decode, then stack into shared memory per key); and
per sample, a dict of tensors and the arrays computed one sample at a time cost ~15 µs,
which over a batch of 64 is a few numpy calls.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from typing import Any, overload

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from rayform.errors import Malformed
from rayform.sample.builder import SampleBuilder
from rayform.torch.arena import lease, worker_arena
from rayform.torch.tensors import to_torch

ALIGN = 64
# Images start 16 bytes past a 64-byte boundary: libjpeg-turbo's SIMD colour conversion,
# writing rows to 32-byte-aligned addresses, decoded a 224×224 frame ~6 µs (3%) slower than
# to ones 16 bytes off (measured on this project's Xeon, into /dev/shm-backed slots; also 0,
# 32, 64, 1024, 2048 against 16, 48, 80, 144, 272, 528 bytes off a page). No tensor op
# needs more than 16-byte alignment of uint8 rows.
IMAGE_SKEW = 16
CollateMap = dict[type | tuple[type, ...], Callable[..., Any]]


Span = tuple[str, tuple[int, ...], str, int, int]  # key, (size, *shape), dtype, offset, bytes


def _spans(layout: list[tuple[str, tuple[int, ...], np.dtype]], size: int, skew: int = 0
           ) -> tuple[list[Span], int]:
    """Each key's place in one allocation: ``ALIGN``-aligned, plus ``skew`` bytes."""
    spans, total = [], 0
    for key, shape, dtype in layout:
        nbytes = size * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        spans.append((key, (size, *shape), dtype.str, total + skew, nbytes))
        total += (skew + nbytes + ALIGN - 1) // ALIGN * ALIGN
    return spans, total


def _carve(raw: torch.Tensor, spans: list[Span]) -> dict[str, torch.Tensor]:
    return {key: raw[offset : offset + nbytes].view(torch.from_numpy(np.empty(0, dtype)).dtype).view(shape)
            for key, shape, dtype, offset, nbytes in spans}


def batch_view(t: torch.Tensor, image: bool, stacked: bool) -> torch.Tensor:
    """A key's rows as the batch shows them: images channels first (a view, channels-last memory)."""
    if stacked:
        return t.permute(0, 1, 4, 2, 3) if t.dim() == 5 else t.unsqueeze(2)
    if image:
        return t.permute(0, 3, 1, 2) if t.dim() == 4 else t.unsqueeze(1)
    return t


class BatchBuffer:
    """A ``(size, *shape)`` array per key of a sample layout, in two allocations: the images
    in one (in a DataLoader worker, a recycled slot of its :class:`Arena` when one is free,
    else fresh shared memory), everything else in another, so that a batch's small values
    never hold its images' memory."""

    def __init__(self, layout: list[tuple[str, tuple[int, ...], np.dtype]], size: int, images: set[str],
                 stacked: set[str] | frozenset[str] = frozenset()):
        self.size = size
        self.images = images  # keys whose rows are (H, W[, C]) and whose batch is channels first
        self.stacked = stacked  # image keys with history: rows (N, H, W[, C]), batch (B, N, C, H, W)
        self.image_spans, image_bytes = _spans([x for x in layout if x[0] in images], size, IMAGE_SKEW)
        small_spans, small_bytes = _spans([x for x in layout if x[0] not in images], size)
        _check_fits(layout, size, image_bytes + small_bytes)
        in_worker = get_worker_info() is not None
        arena = worker_arena(image_bytes) if in_worker and image_bytes else None
        found = arena.take(image_bytes) if arena is not None else None
        self.taken = found[0] if found is not None else None
        if found is not None:
            image_raw = found[1]
            small_raw = torch.empty(max(small_bytes, 1), dtype=torch.uint8)  # crosses pickled, with the slot number
        else:
            image_raw = _allocate(max(image_bytes, 1), shared=in_worker)
            small_raw = _allocate(max(small_bytes, 1), shared=in_worker)
        self.tensors: dict[str, torch.Tensor] = {**_carve(image_raw, self.image_spans), **_carve(small_raw, small_spans)}
        self.rows: dict[str, np.ndarray] = {key: t.numpy() for key, t in self.tensors.items()}

    def batch_view(self, key: str) -> torch.Tensor:
        return batch_view(self.tensors[key], key in self.images, key in self.stacked)

    def ship(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` as it should leave the worker: with its images in a slot, a :class:`Shipped`
        (only the slot's number crosses); if a transform replaced any image, a plain dict, the
        images left in the slot copied out (the slot is given back once nothing uses it)."""
        if self.taken is None:
            return batch
        if all(key in batch and _same(batch[key], self.batch_view(key)) for key, *_ in self.image_spans):
            return Shipped(batch, self)
        return {k: v.clone() if isinstance(v, torch.Tensor) and k in self.images else v for k, v in batch.items()}


def _same(a: Any, b: torch.Tensor) -> bool:
    return isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr() and a.shape == b.shape \
        and a.stride() == b.stride()


class Shipped(dict[str, Any]):
    """A batch whose images are in a worker's arena slot: pickled as the slot's number, the
    images' layout and everything else by value; unpickled (in the consuming process) as a
    plain dict whose image tensors are views of the slot (``arena.lease``)."""

    def __init__(self, batch: dict[str, Any], buf: BatchBuffer):
        super().__init__(batch)
        self.buf = buf

    def __copy__(self) -> Shipped:
        # DataLoader's default_convert copies a mapping it is given (batch_size=None): the copy
        # still ships, rather than being unpickled into the worker that made it
        return Shipped(dict(self), self.buf)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)  # a copy owns its memory: the slot stays this batch's

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        buf, taken = self.buf, self.buf.taken
        assert taken is not None
        taken.shipped = True  # from now on the consumer gives the slot back
        images = [(span, span[0] in buf.stacked) for span in buf.image_spans]
        rest = {k: _by_value(v) for k, v in self.items() if k not in buf.images}
        return (_unship, (taken.arena.path, taken.arena.slot_bytes, taken.arena.slots, taken.slot, images, rest))


def _unship(path: str, slot_bytes: int, slots: int, slot: int, images: list[tuple[Span, bool]],
            rest: dict[str, Any]) -> dict[str, Any]:
    raw = lease(path, slot_bytes, slots, slot)
    out: dict[str, Any] = _as_tensors(rest)
    carved = _carve(raw, [span for span, _ in images])
    for (span, stacked) in images:
        out[span[0]] = batch_view(carved[span[0]], True, stacked)
    return out


def _by_value(v: Any) -> Any:
    """Tensors (also inside dicts: ``meta``'s collated ints) as numpy arrays, pickled by value:
    a tensor would be moved to shared memory and its file descriptor passed over a socket,
    which costs both processes more than the few bytes it holds."""
    if isinstance(v, torch.Tensor):
        return v.numpy()
    if isinstance(v, dict):
        return {k: _by_value(x) for k, x in v.items()}
    return v


def _as_tensors(v: Any) -> Any:
    """``_by_value`` undone: every numpy array a tensor again (a collated batch holds no numpy arrays)."""
    if isinstance(v, np.ndarray):
        return torch.from_numpy(v)
    if isinstance(v, dict):
        return {k: _as_tensors(x) for k, x in v.items()}
    return v


class Sample(dict[str, Any]):
    """A sample dict that remembers which batch buffer row holds its values."""

    __slots__ = ("batch", "row", "made")

    def __init__(self, values: dict[str, Any], batch: BatchBuffer | None = None, row: int = -1):
        super().__init__(values)
        self.batch = batch
        self.row = row
        self.made = values  # what was built, so a value a transform replaced is told apart by identity

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:  # crosses a process boundary as a plain dict
        return (dict, (dict(self),))


class BatchLayout:
    """What every batch buffer of one sample builder holds, worked out once per dataset."""

    def __init__(self, builder: SampleBuilder):
        self.builder = builder
        self.arrays = builder.layout()
        self.images = {s.name for s in builder.images}
        self.stacked = self.images & set(builder.history)

    def buffer(self, size: int) -> BatchBuffer:
        return BatchBuffer(self.arrays, size, self.images, self.stacked)

    def samples(self, buf: BatchBuffer, metas: list[dict[str, Any]],
                transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Sequence[dict[str, Any]]:
        """The samples ``SampleBuilder.fill`` built into ``buf`` (``metas``: theirs): each
        given to ``transform``, or without one a :class:`BuiltBatch`."""
        built = BuiltBatch(buf, self.builder, metas)
        return built if transform is None else [transform(sample) for sample in built]


class BuiltBatch(MutableSequence[dict[str, Any]]):
    """The samples of a batch built whole into one :class:`BatchBuffer`, each made (as a
    :class:`Sample` of views of its rows) only when asked for: the default collate returns
    the buffer's arrays as the batch and makes none but the first. A list to a ``collate_fn``
    of the user's: once it changes the list (sorts, drops, replaces a sample) or a sample
    (replaces a value), the batch is collated the ordinary way."""

    def __init__(self, buf: BatchBuffer, builder: SampleBuilder, metas: list[dict[str, Any]]):
        self.buf = buf
        self.builder = builder
        self.metas = metas
        self._made: list[Sample | None] = [None] * len(metas)
        self._list: list[dict[str, Any]] | None = None  # every sample, once the list itself was changed

    def __len__(self) -> int:
        return len(self.metas) if self._list is None else len(self._list)

    @overload
    def __getitem__(self, j: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, j: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, j: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if self._list is not None:
            return self._list[j]
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(len(self)))]
        if not -len(self) <= j < len(self):
            raise IndexError(f"sample {j} of a batch of {len(self)}")
        j %= len(self)
        made = self._made[j]
        if made is None:
            made = self._made[j] = Sample(to_torch(self.builder.sample(self.buf.rows, j, self.metas[j])), self.buf, j)
        return made

    def _changing(self) -> list[dict[str, Any]]:
        if self._list is None:
            self._list = [self[i] for i in range(len(self))]
        return self._list

    @overload
    def __setitem__(self, j: int, value: dict[str, Any]) -> None: ...

    @overload
    def __setitem__(self, j: slice, value: Iterable[dict[str, Any]]) -> None: ...

    def __setitem__(self, j: int | slice, value: Any) -> None:
        self._changing()[j] = value

    def __delitem__(self, j: int | slice) -> None:
        del self._changing()[j]

    def insert(self, j: int, value: dict[str, Any]) -> None:
        self._changing().insert(j, value)

    def sort(self, *, key: Callable[[dict[str, Any]], Any] | None = None, reverse: bool = False) -> None:
        """As ``list.sort`` (a ``collate_fn`` may sort its samples)."""
        self._changing().sort(key=key, reverse=reverse)  # type: ignore[arg-type]

    def untouched(self) -> bool:
        """Neither the list nor any sample made so far has been changed."""
        return self._list is None and all(
            s is None or (s.keys() == s.made.keys() and all(s[k] is v for k, v in s.made.items())) for s in self._made)

    def collated(self, collate_fn_map: CollateMap | None) -> dict[str, Any]:
        out: dict[str, Any] = {key: self.buf.batch_view(key) for key in self.buf.tensors}
        out["meta"] = collate(self.metas, collate_fn_map=collate_fn_map)
        return self.buf.ship(out)


def _check_fits(layout: list[tuple[str, tuple[int, ...], np.dtype]], size: int, nbytes: int) -> None:
    """A batch buffer is sized from the pack's schema, which comes from the store: one that
    would take more than half this machine's memory is refused before it is allocated (a
    manifest declaring a 16384x16384 camera asked for 12.9 GB a batch)."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if nbytes > memory // 2:
        largest = max(layout, key=lambda x: int(np.prod(x[1])) * np.dtype(x[2]).itemsize)
        raise Malformed(f"a batch of {size} would take {nbytes / 2**30:.1f} GiB, more than half this machine's "
                        f"memory: its pack says {largest[0]} is {'x'.join(map(str, largest[1]))} {np.dtype(largest[2])}. "
                        "A broken or hostile pack, or a batch too large: check the pack (rayform show), or ask fewer "
                        "samples a batch")


def _allocate(nbytes: int, shared: bool) -> torch.Tensor:
    if not shared:
        return torch.empty(nbytes, dtype=torch.uint8)
    # The default collate's own way to make a tensor that crosses to the main process by fd.
    storage = torch.empty(0, dtype=torch.uint8)._typed_storage()._new_shared(nbytes, device="cpu")  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch.uint8).new(storage)


def _untouched(batch: Sequence[dict[str, Any]], key: str, buf: BatchBuffer) -> bool:
    """Every sample still holds, under ``key``, the very tensor built into its row of ``buf``."""
    first = batch[0].get(key)
    if not isinstance(first, torch.Tensor) or first.data_ptr() != buf.tensors[key].data_ptr():
        return False  # built elsewhere than the buffer (checked once: every row is built alike)
    for j, s in enumerate(batch):  # identity, not data pointers: a strided view of a row shares its pointer
        if type(s) is not Sample or s.batch is not buf or s.row != j or s.get(key) is not s.made.get(key):
            return False
    return True


def collate_samples(batch: Sequence[dict[str, Any]], *, collate_fn_map: CollateMap | None = None) -> dict[str, Any]:
    if isinstance(batch, BuiltBatch) and batch.untouched():
        return batch.collated(collate_fn_map)
    buf = batch[0].batch if isinstance(batch[0], Sample) else None  # a transform may return a plain dict
    whole = buf is not None and len(batch) == buf.size
    out: dict[str, Any] = {}
    for key in batch[0]:
        if whole and buf is not None and key in buf.tensors and _untouched(batch, key, buf):
            out[key] = buf.batch_view(key)
        else:
            out[key] = collate([s[key] for s in batch], collate_fn_map=collate_fn_map)
    return buf.ship(out) if buf is not None else out


default_collate_fn_map[Sample] = collate_samples

__all__ = ["BatchBuffer", "BatchLayout", "BuiltBatch", "Sample", "collate_samples", "default_collate_fn_map"]
