"""Finding (or making) the pack a dataset reads, on the store it reads it from.

Shared by both datasets, so they resolve ``fps``, the cache and missing packs the same way.
"""

from __future__ import annotations

import logging
import os

from rayform.errors import NotFound, OfflineError
from rayform.pack import Pack
from rayform.read.sample import SampleSpec
from rayform.recordings.slices import Slice
from rayform.store.cache import ShardCache
from rayform.store.store import Store
from rayform.torch.world import World

log = logging.getLogger("rayform")


def store_for(slice_: Slice, cache: ShardCache | str | os.PathLike | None) -> Store:
    if cache is None:
        return slice_.store
    cache = cache if isinstance(cache, ShardCache) else ShardCache(cache)
    ref = slice_.store_ref
    return Store(ref.url, ref.storage_options, cache)


def pack_for(slice_: Slice, store: Store, fps: float, spec: SampleSpec) -> Pack:
    from rayform.pack import Packs, PackSpec
    from rayform.packer.packing import pack_slice

    packs = Packs(store)
    try:
        return packs.find(slice_.id, fps, spec.streams(), spec.horizon if spec.action else 0)
    except OfflineError as e:
        raise OfflineError(
            f"{slice_.id}: its pack at {fps:g} fps is not in the cache and RAYFORM_OFFLINE=1. "
            f"Run: rayform pull {slice_.id} --fps {fps:g}"
        ) from e
    except NotFound:
        world = World.detect()
        if world.world_size > 1 or world.num_workers > 0 or not _writable(store):
            raise
        log.warning("rayform: %s has no pack at %g fps; packing it now into %s", slice_.id, fps, store.display)
        slice_on_store = Slice(store, slice_.id, slice_.digest, slice_.manifest())
        # In this process only: a pool would re-import the user's (often unguarded) script.
        return pack_slice(slice_on_store, PackSpec(fps=fps, max_horizon=max(16, spec.horizon)), workers=1)


def _writable(store: Store) -> bool:
    if store.is_local:
        return os.access(store.root, os.W_OK)
    return not store.offline
