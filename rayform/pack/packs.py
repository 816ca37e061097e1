"""``client.packs``: the packs of a slice a store holds: list them, get one by its spec, find
one that fits. (Making one is the packer's: ``rayform.packer.packing.pack_slice``.)"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import Any

from rayform import names
from rayform.errors import Malformed, PackNotFound
from rayform.pack.manifest import Pack
from rayform.pack.spec import PackSpec
from rayform.recordings.slices import Slice
from rayform.store.cached import CachedStore
from rayform.untrusted import mapping


class Packs:
    def __init__(self, store: CachedStore):
        self.store = store

    def list(self, slice_: Slice | str) -> builtins.list[Pack]:
        sid = names.slice_id(slice_ if isinstance(slice_, str) else slice_.id, trusted=True)
        out = []
        for key in self.store.list_refs(f"refs/packs/{sid}"):
            parts = key.split("/")
            if len(parts) != 4 or not names.PACK_KEY.fullmatch(parts[3].removesuffix(".json")):
                continue
            what = f"ref {key} in {self.store.display}"

            def manifest_of(ref: dict[str, Any], what: str = what) -> str:
                return names.digest(mapping(ref, what).get("manifest"), f"{what}: manifest")

            digest = self.store.get_ref(key, parse=manifest_of)
            pack = Pack(digest, self.store.get_json_blob(digest, f"pack manifest of {sid}"))
            if pack.slice_id != sid:
                raise Malformed(f"{what}: names a pack of {pack.slice_id}, not of {sid}")
            out.append(pack)
        return out

    def get(self, slice_: Slice | str, spec: PackSpec) -> Pack:
        """The pack made with exactly ``spec`` (streams resolved as packing resolves them)."""
        sid = slice_ if isinstance(slice_, str) else slice_.id
        for pack in self.list(sid):
            if pack.spec == spec or (spec.streams is None and pack.spec == dataclasses.replace(spec, streams=pack.spec.streams)):
                return pack
        raise PackNotFound(f"{sid}: no pack at {spec.fps} fps with these parameters. Run: rayform pack {sid} --fps {spec.fps}")

    def find(self, slice_: Slice | str, fps: float, streams: Sequence[str] = (), horizon: int = 0,
             history: int = 0) -> Pack:
        """A pack at ``fps`` holding ``streams`` with a horizon of at least ``horizon`` and a
        history at least ``history`` steps deep."""
        sid = slice_ if isinstance(slice_, str) else slice_.id
        fitting = [
            p for p in self.list(sid)
            if float(p.fps) == float(fps) and set(streams) <= set(p.spec.streams or ())
            and p.spec.max_horizon >= horizon and p.spec.max_history >= history
        ]
        if not fitting:
            raise PackNotFound(
                f"{sid}: no pack at {float(fps):g} fps with {', '.join(streams) or 'these streams'} and horizon ≥ {horizon}. "
                f"Run: rayform pack {sid} --fps {float(fps):g}"
            )
        # interleaved first (streamed batches are mixed), with statistics, aligned with a snap,
        # then the fewest streams and the shortest horizon
        return min(fitting, key=lambda p: (p.spec.interleave_seed is None, p.stats is None, p.spec.snap == 0,
                                           len(p.spec.streams or ()), p.spec.max_horizon, p.spec.max_history,
                                           p.digest))
