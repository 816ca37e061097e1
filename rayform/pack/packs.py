"""``client.packs``: the packs of a slice a store holds: list them, get one by its spec, find
one that fits. (Making one is the packer's: ``rayform.packer.driver.pack_slice``.)"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.errors import Malformed, PackNotFound
from rayform.pack.manifest import Pack
from rayform.pack.spec import PackSpec
from rayform.recordings.slices import Slice
from rayform.untrusted import mapping


class PackRef(NamedTuple):
    """A pack ref as listed: its slice, its key, the manifest it names and when it was made."""

    slice_id: str
    key: str
    manifest: str
    made: str


class Packs:
    def __init__(self, store: CachedStore):
        self.store = store

    def list(self, slice_: Slice | str) -> builtins.list[Pack]:
        """The slice's packs, by key."""
        return [pack for _, pack in self.listed(slice_)]

    def listed(self, slice_: Slice | str) -> builtins.list[tuple[str, Pack]]:
        """Each pack of the slice with when it was made (ISO 8601; "" for a pack whose ref
        predates that), by key."""
        sid = names.slice_id(slice_ if isinstance(slice_, str) else slice_.id, trusted=True)
        out = []
        for ref in self.refs(sid):
            out.append((ref.made, self.read(ref)))
        return out

    def refs(self, slice_id: str | None = None) -> builtins.list[PackRef]:
        """The pack refs of one slice (None: of every slice, even one whose own ref is gone),
        their manifests not read (``ops.references`` walks a store that may hold a bad one)."""
        prefix = "refs/packs" if slice_id is None else f"refs/packs/{names.slice_id(slice_id, trusted=True)}"
        out = []
        for key in self.store.list_refs(prefix):
            parts = key.split("/")
            if len(parts) != 4 or not names.PACK_KEY.fullmatch(parts[3].removesuffix(".json")) \
                    or not names.SLICE_ID.fullmatch(parts[2]):
                continue
            what = f"ref {key} in {self.store.display}"

            def read_ref(ref: dict[str, Any], what: str = what) -> tuple[str, str]:
                made = mapping(ref, what).get("created", "")
                if not isinstance(made, str) or len(made) > 40:
                    raise Malformed(f"{what}: created {str(made)[:40]!r} is not a time")
                return names.digest(ref.get("manifest"), f"{what}: manifest"), made

            digest, made = self.store.get_ref(key, parse=read_ref)
            out.append(PackRef(parts[2], parts[3].removesuffix(".json"), digest, made))
        return out

    def read(self, ref: PackRef) -> Pack:
        """The pack a ref names, checked to be the one that lives there."""
        pack = Pack(ref.manifest, self.store.get_json_blob(ref.manifest, f"pack manifest of {ref.slice_id}"))
        what = f"ref refs/packs/{ref.slice_id}/{ref.key}.json in {self.store.display}"
        if pack.slice_id != ref.slice_id:
            raise Malformed(f"{what}: names a pack of {pack.slice_id}, not of {ref.slice_id}")
        if pack.key != ref.key:
            raise Malformed(f"{what}: names the pack {pack.key}, which does not live there")
        return pack

    def get(self, slice_: Slice | str, spec: PackSpec) -> Pack:
        """The pack made with exactly ``spec`` (streams resolved as packing resolves them)."""
        sid = slice_ if isinstance(slice_, str) else slice_.id
        for pack in self.list(sid):
            if pack.spec == spec or (spec.streams is None and pack.spec == dataclasses.replace(spec, streams=pack.spec.streams)):
                return pack
        raise PackNotFound(f"{sid}: no pack at {spec.fps} fps with these parameters. Run: rayform pack {sid} --fps {spec.fps}")

    def shard_urls(self, pack: Pack) -> builtins.list[str]:
        """Where each shard of ``pack`` lies in the store, in pack order (``s3://…/blobs/aa/<sha256>``,
        or a local path): for a tool that reads the tars itself, unverified (rayform's own way
        with ``webdataset`` is ``rayform.interop.webdataset.VerifiedShards``)."""
        return [self.store.blob_url(s.sha256) for s in pack.shards]

    def named(self, slice_: Slice | str, key: str) -> Pack:
        """The pack with this key (``fps15-129e34cc``, as ``rayform show`` lists them)."""
        sid = slice_ if isinstance(slice_, str) else slice_.id
        if not isinstance(key, str) or not names.PACK_KEY.fullmatch(key):
            raise PackNotFound(f"{str(key)[:40]!r}: not a pack key (they look like fps15-129e34cc)")
        for pack in self.list(sid):
            if pack.key == key:
                return pack
        raise PackNotFound(f"{sid}: no pack {key}. Its packs: rayform show {sid}")

    def find(self, slice_: Slice | str, fps: float, streams: Sequence[str] = (), horizon: int = 0,
             history: int = 0, resize: tuple[int, int] | None = None, any_size: bool = False) -> Pack:
        """The pack that serves samples at ``fps`` of ``streams`` with a horizon of at least
        ``horizon``, a history at least ``history`` steps deep, and images at ``resize`` (None:
        as recorded; ``any_size``: whatever their size, for what does not read images): a resized
        pack serves only its own size, never a larger one by upscaling.
        Among several that serve, full resolution before resized, then the newest (``made``),
        then by key: never by chance."""
        sid = slice_ if isinstance(slice_, str) else slice_.id
        at_fps = [(made, p) for made, p in self.listed(sid) if float(p.fps) == float(fps)]
        fitting = [(made, p) for made, p in at_fps
                   if set(streams) <= set(p.spec.streams or ()) and p.spec.max_horizon >= horizon
                   and p.spec.max_history >= history and (any_size or serves_size(p, resize))]
        if not fitting:
            resized = [p for _, p in at_fps if set(streams) <= set(p.spec.streams or ()) and not serves_size(p, resize)]
            if resized:
                size = resized[0].spec.resize
                assert size is not None
                ask = "its recorded size" if resize is None else f"{resize[0]}x{resize[1]}"
                raise PackNotFound(
                    f"{sid}: its pack at {float(fps):g} fps ({resized[0].key}) holds images resized to "
                    f"{size[0]}x{size[1]}, not {ask}. Ask resize=({size[0]}, {size[1]}), or run: rayform pack {sid} "
                    f"--fps {float(fps):g}" + (f" --resize {resize[0]}x{resize[1]}" if resize else ""))
            raise PackNotFound(
                f"{sid}: no pack at {float(fps):g} fps with {', '.join(streams) or 'these streams'} and horizon ≥ {horizon}. "
                f"Run: rayform pack {sid} --fps {float(fps):g}"
            )
        return preferred(fitting)


def serves_size(pack: Pack, resize: tuple[int, int] | None) -> bool:
    """Whether a pack's images serve samples at ``resize`` (None: as recorded): a full-size pack
    serves any size (decoded there); a resized one only its own."""
    return pack.spec.resize is None or (resize is not None and tuple(pack.spec.resize) == tuple(resize))


def preferred(packs: Sequence[tuple[str, Pack]]) -> Pack:
    """Among packs that serve an ask, with when each was made: full resolution before resized,
    then the newest (a pack whose ref does not say counts as oldest), then the first by key."""
    ranked = sorted(packs, key=lambda item: item[1].key)
    ranked = sorted(ranked, key=lambda item: item[0], reverse=True)  # stable: ties keep key order
    ranked = sorted(ranked, key=lambda item: item[1].spec.resize is not None)
    return ranked[0][1]


_SPEC_WORDS = {"resize": "resize", "image_codec": "codec", "jpeg_quality": "quality", "interleave_seed": "interleave seed",
               "max_horizon": "horizon", "max_history": "history", "streams": "streams", "staleness": "staleness",
               "snap": "snap", "shard_bytes": "shard size", "clip_frames": "clip frames", "video_crf": "crf",
               "video_preset": "preset"}


def apart(p: Pack, others: Sequence[Pack]) -> builtins.list[str]:
    """What sets ``p`` apart from the other packs at its rate: each parameter of its own, as words."""
    out = []
    for field, word in _SPEC_WORDS.items():
        mine = getattr(p.spec, field)
        if any(getattr(o.spec, field) != mine for o in others):
            value = ("time order" if mine is None else str(mine)) if field == "interleave_seed" else \
                ("full size" if mine is None else "x".join(map(str, mine))) if field == "resize" else \
                ",".join(mine or ()) if field == "streams" else str(mine)
            out.append(f"{word} {value}")
    return out


def packs_described(packs: Packs, s: Slice | str) -> builtins.list[tuple[Pack, str, bool, builtins.list[str]]]:
    """Each pack of the slice with when it was made, whether a dataset at its rate reads it by
    default (``Packs.find``'s preference), and what sets it apart from the others at its rate."""
    listed = packs.listed(s)
    out = []
    for made, p in listed:
        peers = [(m, o) for m, o in listed if float(o.fps) == float(p.fps)]
        full = [(m, o) for m, o in peers if o.spec.resize is None]  # a dataset without resize= reads these
        default = bool(full) and preferred(full) is p
        out.append((p, made, default, apart(p, [o for _, o in peers if o is not p])))
    return out
