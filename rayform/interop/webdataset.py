"""A pack read through ``webdataset``: its shards are plain WebDataset tars, and
:class:`VerifiedShards` is the source stage of a ``webdataset`` pipeline that hands it each
shard's verified local copy, fetched into the cache (chunk by chunk against the pack's digests,
whole against its name) just before the pipeline opens it. So a ``webdataset`` user keeps
rayform's guarantees (no byte decoded before it is verified; a remote store read through the
cache) with ``webdataset``'s own stages after it::

    import webdataset as wds
    from rayform.interop.webdataset import VerifiedShards

    shards = VerifiedShards(client.slices.get("demo"), fps=15)
    pipeline = wds.DataPipeline(shards, wds.split_by_worker, wds.tarfile_to_samples(),
                                wds.decode("rgb8"), wds.to_tuple("cam0.rgb.jpg", "lowdim.mp"))

``Packs.shard_urls`` gives the shards' URLs in the store instead, for tools that fetch them
themselves (unverified).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from webdataset import PipelineStage

from rayform.pack import Pack, Packs
from rayform.read.reader import PackReader
from rayform.recordings.slices import Slice


class VerifiedShards(PipelineStage):  # type: ignore[misc]  # webdataset has no type information
    """The shards of the slice's pack at ``fps`` (or the one ``pack`` names, by key or as a
    Pack), in pack order or, with ``seed``, shuffled by it: a ``webdataset`` source stage
    yielding ``{"url": <verified local copy>}`` (``__len__``: the shards). Each copy is held in
    the cache (pinned) while the pipeline reads it."""

    def __init__(self, slice_: Slice, fps: float | None = None, pack: str | Pack | None = None,
                 seed: int | None = None):
        packs = Packs(slice_.store)
        chosen = pack if isinstance(pack, Pack) else packs.named(slice_, pack) if pack is not None else \
            packs.find(slice_, 15 if fps is None else fps, any_size=True)
        self.pack = chosen
        self.reader = PackReader(slice_.store, chosen, chosen.members)
        self.seed = seed

    def __len__(self) -> int:
        return len(self.pack.shards)

    def run(self) -> Iterator[dict[str, str]]:
        order = np.arange(len(self.pack.shards))
        if self.seed is not None:
            order = np.random.default_rng(self.seed).permutation(order)
        for shard in order.tolist():
            path, pin = self.reader.pinned(shard, fetch=True)
            try:
                yield {"url": str(path)}
            finally:
                if pin is not None:
                    pin.release()
