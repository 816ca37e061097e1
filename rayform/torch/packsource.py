"""What both datasets do before they read: make the sample spec of their arguments, and find
the pack it reads on the slice's store (or make it there, where that is safe)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from rayform.errors import InvalidInput, NotFound
from rayform.pack import Pack, Packs
from rayform.read.sample import SampleBuilder, SampleSpec
from rayform.recordings.slices import Slice
from rayform.store.cached import CachedStore
from rayform.torch.world import World

log = logging.getLogger("rayform")
_DEFAULTS = SampleSpec("_")


def sample_spec(obs: str | Sequence[str] | SampleSpec, action: str | None, fps: float, horizon: int,
                frame: str | None) -> SampleSpec:
    """The datasets' sample arguments as one checked value (``obs`` may be that value already)."""
    if isinstance(obs, SampleSpec):
        if (action, fps, horizon, frame) != (_DEFAULTS.action, _DEFAULTS.fps, _DEFAULTS.horizon, _DEFAULTS.frame):
            raise InvalidInput("obs is a SampleSpec: give action, fps, horizon and frame inside it, not beside it")
        return obs
    return SampleSpec(obs, action, fps, horizon, frame)


def open_samples(slice_: Slice, spec: SampleSpec) -> SampleBuilder:
    """The builder of ``spec``'s samples from the slice's pack at ``spec.fps``."""
    return SampleBuilder(pack_for(slice_, spec), spec)


def pack_for(slice_: Slice, spec: SampleSpec) -> Pack:
    """A pack of the slice that holds ``spec``'s streams and horizon. Where there is none, a
    single process with a writable store packs it (a progress bar and one log line);
    elsewhere it is an error naming the command to run."""
    store = slice_.store
    try:
        return Packs(store).find(slice_.id, spec.fps, spec.streams(), spec.horizon if spec.action else 0)
    except NotFound:
        world = World.detect()
        if world.world_size > 1 or world.num_workers > 0 or not _writable(store):
            raise
    from rayform.pack import PackSpec
    from rayform.packer.packing import (
        pack_slice,  # the packer (and tqdm) only when packing
    )

    log.warning("rayform: %s has no pack at %g fps; packing it now into %s", slice_.id, spec.fps, store.display)
    # In this process only: a pool would re-import the user's (often unguarded) script.
    return pack_slice(slice_, PackSpec(fps=spec.fps, max_horizon=max(16, spec.horizon)), workers=1)


def _writable(store: CachedStore) -> bool:
    if store.is_local:
        return os.access(store.root, os.W_OK)
    return not store.offline
