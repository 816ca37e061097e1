"""The pack a dataset reads, chosen and checked in one place both datasets use.

``Packs.find`` picks among the slice's packs one that serves the spec (its streams, horizon,
history and image size; full resolution before resized, then the newest), or the spec names
one (``pack=``), checked to serve it. A slice with no pack at the spec's fps is packed there
by a single process with a writable store (a progress bar and one log line); elsewhere (several
ranks, a DataLoader worker, a read-only store) that is an error naming the command to run.
Never a second pack behind the user's back: a pack that lacks something is said, with the
``rayform pack`` that makes one that has it.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Sequence

from rayform.cache.store_view import CachedStore
from rayform.errors import InvalidInput, NotFound, PackNotFound, StreamNotFound
from rayform.pack import Pack, Packs
from rayform.pack.packs import serves_size
from rayform.recordings.slices import Slice
from rayform.sample.action import DELTA
from rayform.sample.spec import SampleSpec
from rayform.torch.world import World

log = logging.getLogger("rayform")


def pack_for(slice_: Slice, spec: SampleSpec) -> Pack:
    """The pack of the slice that serves ``spec`` (``Packs.find``: its streams, horizon, history
    and image size; among several, full resolution before resized, then the newest), or the
    one ``spec.pack`` names, checked to serve it. Where the slice has none at ``spec.fps``, a
    single process with a writable store packs it (a progress bar and one log line); elsewhere
    it is an error naming the command to run. Never a second pack behind the user's back."""
    store = slice_.store
    packs = Packs(store)
    horizon, history = spec.horizon, spec.deepest_history()
    # an action part x_delta reads a recorded x_delta, else x's delta: a pack's schema says which
    # (its recorded streams), and only where no pack serves is a segment read to tell
    if spec.pack is not None:
        named = packs.named(slice_.id, spec.pack)
        return _checked(slice_, named, spec, spec.streams(named.schema), horizon, history)
    wanted = spec.streams()
    try:
        found = packs.find(slice_.id, spec.fps, wanted, horizon, history, spec.resize)
        recorded = spec.streams(found.schema)
        return found if recorded == wanted else packs.find(slice_.id, spec.fps, recorded, horizon, history,
                                                             spec.resize)
    except NotFound as e:
        missing = e
    recorded = spec.streams(slice_.segment(0).streams) if any(a.endswith(DELTA) for a in spec.actions()) else wanted
    if recorded != wanted:  # a recorded x_delta, which no pack has as x's delta
        wanted = recorded
        try:
            return packs.find(slice_.id, spec.fps, wanted, horizon, history, spec.resize)
        except NotFound as e:
            missing = e
    check_streams(slice_, wanted)
    at_fps = [p for p in packs.list(slice_.id) if float(p.fps) == float(spec.fps)]
    if at_fps:  # say what the ones there lack
        best = max(at_fps, key=lambda p: (len(p.spec.streams or ()), p.spec.max_horizon, p.spec.max_history))
        _checked(slice_, best, spec, wanted, horizon, history)
        raise missing  # they lack nothing else: the size of their images (find says it)
    for i in range(1, len(slice_.segments)):  # a stream some segment lacks: said before anything is packed
        segment = slice_.segment(i)
        for name in wanted:
            segment.stream(name)
    world = World.detect()
    if world.world_size > 1 or world.num_workers > 0 or not _writable(store):
        raise PackNotFound(f"{slice_.id}: no pack at {spec.fps:g} fps. Run: rayform pack {slice_.id} --fps {spec.fps:g}")
    from rayform.pack import PackSpec
    from rayform.packer.driver import (
        pack_slice,  # the packer (and tqdm) only when packing
    )

    log.warning("rayform: %s has no pack at %g fps; packing it now into %s", slice_.id, spec.fps, store.display)
    # In this process only: a pool would re-import the user's (often unguarded) script.
    return pack_slice(slice_, PackSpec(fps=spec.fps, max_horizon=max(16, spec.horizon), max_history=history),
                      workers=1)


def _checked(slice_: Slice, pack: Pack, spec: SampleSpec, wanted: Sequence[str], horizon: int, history: int) -> Pack:
    """``pack``, if it serves ``spec``; else one error saying what it lacks and how to pack it."""
    run = f"Run: rayform pack {slice_.id} --fps {spec.fps:g}"
    if float(pack.fps) != float(spec.fps):
        raise InvalidInput(f"{slice_.id}: pack {pack.key} is at {pack.fps:g} fps, the dataset asks {spec.fps:g}. "
                           f"Ask fps={pack.fps:g}, or name a pack at {spec.fps:g} fps")
    lacking = [name for name in wanted if name not in (pack.spec.streams or ())]
    if lacking:
        raise StreamNotFound(
            f"{slice_.id}: no stream {lacking[0]!r} in its pack {pack.key} at {spec.fps:g} fps. It has: "
            f"{', '.join(pack.spec.streams or ())}. {run} "
            f"--streams {','.join(dict.fromkeys([*(pack.spec.streams or ()), *wanted]))}"
        )
    beyond = pack.spec.beyond(history, horizon)
    if beyond is not None:
        raise InvalidInput(f"{slice_.id}: {beyond[0]} at {spec.fps:g} fps. {run} {beyond[1]}")
    if not serves_size(pack, spec.resize):
        size = pack.spec.resize
        assert size is not None
        raise InvalidInput(f"{slice_.id}: pack {pack.key} holds images resized to {size[0]}x{size[1]}; "
                           f"the dataset asks {'their recorded size' if spec.resize is None else spec.resize} "
                           f"(a resized pack serves its own size only). Ask resize=({size[0]}, {size[1]}), or "
                           f"name another pack")
    return pack


def check_streams(slice_: Slice, wanted: Sequence[str]) -> None:
    """Every stream asked for is one the slice records (its first segment's), or one error
    naming the closest it has: a misspelt name is no reason to pack again."""
    have = slice_.segment(0).streams
    for name in wanted:
        if name not in have:
            close = difflib.get_close_matches(name, list(have), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise StreamNotFound(f"{slice_.id}: no stream {name!r} in the slice.{hint} It has: {', '.join(sorted(have))}")


def _writable(store: CachedStore) -> bool:
    if store.is_local:
        return os.access(store.root, os.W_OK)
    return not store.offline
