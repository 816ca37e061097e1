"""Batches without a collation copy: every value written straight into the batch's memory.

``EpisodeDataset.__getitems__`` allocates ONE buffer per batch (in shared memory inside a
DataLoader worker, as the default collate would for each key) and lays out in it, per
key, a ``(B, ...)`` array; each sample's images are decoded straight into their rows and
its arrays written into theirs. A sample's values are views of its rows (images as
``(C, H, W)`` views of ``(H, W, C)`` rows). The default collate recognises these samples
(:class:`Sample` is registered in torch's ``default_collate_fn_map``) and returns the
buffer's arrays as the batch, with no copy: images come out ``(B, C, H, W)`` in
channels-last memory format. Whatever a user's transform replaced, or a batch assembled
from other samples, is collated the ordinary way.

Why: on this kind of machine fresh memory costs about as much as decoding into it, and
the default path pays for it twice (decode, then stack into shared memory per key).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import collate, default_collate_fn_map

from rayform.read.sample import SampleBuilder

ALIGN = 64


class BatchBuffer:
    """One allocation holding a ``(size, *shape)`` array per key of a sample layout."""

    def __init__(self, layout: list[tuple[str, tuple[int, ...], np.dtype]], size: int, images: set[str],
                 stacked: set[str] | frozenset[str] = frozenset()):
        self.size = size
        self.images = images  # keys whose rows are (H, W[, C]) and whose batch is channels first
        self.stacked = stacked  # image keys with history: rows (N, H, W[, C]), batch (B, N, C, H, W)
        spans, total = [], 0
        for key, shape, dtype in layout:
            nbytes = size * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            spans.append((key, shape, dtype, total, nbytes))
            total += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        raw = _allocate(max(total, 1), shared=get_worker_info() is not None)
        self.tensors: dict[str, torch.Tensor] = {}
        self.rows: dict[str, np.ndarray] = {}
        for key, shape, dtype, offset, nbytes in spans:
            t = raw[offset : offset + nbytes].view(torch.from_numpy(np.empty(0, dtype)).dtype).view(size, *shape)
            self.tensors[key] = t
            self.rows[key] = t.numpy()

    def slots(self, j: int) -> dict[str, np.ndarray]:
        # rows[j] of a (B,) array is a scalar copy; a 0-d view keeps writes in the buffer
        return {key: rows[j] if rows.ndim > 1 else rows[j : j + 1].reshape(()) for key, rows in self.rows.items()}

    def batch_view(self, key: str) -> torch.Tensor:
        t = self.tensors[key]
        if key in self.stacked:
            return t.permute(0, 1, 4, 2, 3) if t.dim() == 5 else t.unsqueeze(2)
        if key in self.images:
            return t.permute(0, 3, 1, 2) if t.dim() == 4 else t.unsqueeze(1)
        return t


class Sample(dict[str, Any]):
    """A sample dict that remembers which batch buffer row holds its values."""

    __slots__ = ("batch", "row")

    def __init__(self, values: dict[str, Any], batch: BatchBuffer | None = None, row: int = -1):
        super().__init__(values)
        self.batch = batch
        self.row = row

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:  # crosses a process boundary as a plain dict
        return (dict, (dict(self),))


class BatchLayout:
    """What every batch buffer of one sample builder holds, worked out once per dataset."""

    def __init__(self, builder: SampleBuilder):
        self.arrays = builder.layout()
        self.images = {s.name for s in builder.images}
        self.stacked = self.images & set(builder.history)

    def buffer(self, size: int) -> BatchBuffer:
        return BatchBuffer(self.arrays, size, self.images, self.stacked)


def _allocate(nbytes: int, shared: bool) -> torch.Tensor:
    if not shared:
        return torch.empty(nbytes, dtype=torch.uint8)
    # The default collate's own way to make a tensor that crosses to the main process by fd.
    storage = torch.empty(0, dtype=torch.uint8)._typed_storage()._new_shared(nbytes, device="cpu")  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=torch.uint8).new(storage)


def _untouched(batch: Sequence[dict[str, Any]], key: str, buf: BatchBuffer) -> bool:
    rows = buf.tensors[key]
    for j, s in enumerate(batch):
        v = s.get(key)
        if not isinstance(s, Sample) or s.batch is not buf or s.row != j:
            return False
        if not isinstance(v, torch.Tensor) or v.data_ptr() != rows[j].data_ptr():
            return False
    return True


CollateMap = dict[type | tuple[type, ...], Callable[..., Any]]


def collate_samples(batch: Sequence[dict[str, Any]], *, collate_fn_map: CollateMap | None = None) -> dict[str, Any]:
    buf = batch[0].batch if isinstance(batch[0], Sample) else None  # a transform may return a plain dict
    whole = buf is not None and len(batch) == buf.size
    out: dict[str, Any] = {}
    for key in batch[0]:
        if whole and buf is not None and key in buf.tensors and _untouched(batch, key, buf):
            out[key] = buf.batch_view(key)
        else:
            out[key] = collate([s[key] for s in batch], collate_fn_map=collate_fn_map)
    return out


default_collate_fn_map[Sample] = collate_samples

__all__ = ["BatchBuffer", "BatchLayout", "Sample", "collate_samples", "default_collate_fn_map"]
