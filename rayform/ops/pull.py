"""``rayform pull``: a slice's manifests and shards into the cache, ready for offline use."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from rayform import names
from rayform.cache.directory import ShardCache
from rayform.client import Client
from rayform.errors import Malformed, OfflineError, PackNotFound
from rayform.ops.references import pack_closure, pack_data
from rayform.pack import Pack
from rayform.untrusted import json_document


@dataclass
class PullReport:
    slice_id: str
    packs: list[Pack] = field(default_factory=list)
    fetched: int = 0  # blobs that came over the network
    present: int = 0  # blobs already cached and verified
    bytes: int = 0  # bytes that came over the network
    local: bool = False  # the store is a local directory: nothing needed fetching


def pull(client: Client, slice_id: str, fps: float | None = None, progress: bool = True,
         pack: str | None = None) -> PullReport:
    """Fetch everything training on ``slice_id`` needs (the pack ``pack`` names, its packs at
    ``fps``, or all of them).

    Resumable: what an interrupted pull already cached is verified and kept.
    """
    store = client.store
    try:
        return _pull(client, slice_id, fps, progress, pack)
    except OfflineError:  # pulling is what reaches the store: the usual "run rayform pull" cannot help
        raise OfflineError(f"rayform pull {slice_id}: the cache lacks what it would fetch from {store.display}, "
                           "and RAYFORM_OFFLINE=1 keeps rayform off the store. Unset RAYFORM_OFFLINE for the pull, "
                           "then set it again to train offline") from None


def _pull(client: Client, slice_id: str, fps: float | None, progress: bool, key: str | None) -> PullReport:
    store = client.store
    slice_ = client.slices.get(slice_id)  # caches the slice's ref and manifest
    report = PullReport(slice_.id, local=store.cache is None)
    packs = [client.packs.named(slice_, key)] if key is not None else \
        [p for p in client.packs.list(slice_) if fps is None or float(p.fps) == float(fps)]
    if not packs and store.offline:  # the cache's view holds none: whether the store has one is unknown
        raise OfflineError(f"{slice_.id}: no pack of it in the cache")
    if not packs:
        at = f" at {fps:g} fps" if fps is not None else ""
        raise PackNotFound(f"{slice_.id}: no pack{at} to pull. Run: rayform pack {slice_.id} --fps {fps or 15:g}")
    report.packs = packs
    if store.cache is None:
        return report
    cache = store.cache
    cache.remove_stale_temporaries()
    for where in dict.fromkeys(seg.bundle or seg.version for seg in slice_.segments):
        store.local_blob(where)  # segment manifests (their bundles, or loose): `slices show` wants them
    client.segments.catalog.table(columns=["id"])  # its parts: offline, `segments ls` lists what the cache holds
    blobs = list(dict.fromkeys(d for p in packs for d in pack_data(p)))
    sizes = {s.sha256: s.bytes for p in packs for s in p.shards}
    todo = [d for d in blobs if not cache.has(d)]
    total = sum(sizes.get(d, 0) for d in todo)
    bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"pull {slice_.id}",
               disable=not progress, leave=False)
    for n, digest in enumerate(blobs, 1):
        arrived = [0]

        def on_bytes(k: int, arrived: list[int] = arrived) -> None:
            arrived[0] += k
            bar.update(k)

        store.local_blob(digest, on_bytes=on_bytes)  # a bad cached copy is fetched again
        if arrived[0]:
            report.fetched += 1
            report.bytes += arrived[0]
        else:
            report.present += 1
        bar.set_postfix_str(f"{n}/{len(blobs)} blobs")
    bar.close()
    return report


def _cached_packs(cache: ShardCache, store_id: str, slice_id: str) -> Iterator[tuple[str, Pack]]:
    """``(ref key, pack)`` of each pack of a slice whose ref and manifest the cache holds
    (checked as on arrival: one that is not rayform's is left out)."""
    for pkey in cache.list_refs(store_id, f"refs/packs/{slice_id}"):
        try:
            digest = names.digest((cache.get_ref(store_id, pkey) or {}).get("manifest"))
            path = cache.copy(digest)
            if path is not None:
                yield pkey, Pack(digest, json_document(path.read_bytes(), f"pack manifest {digest[:16]}"))
        except Malformed:
            continue


def cached_blobs_of(cache: ShardCache, slice_id: str) -> set[str]:
    """The blobs of a slice's packs (manifests, indexes, chunk digests, shards) that the
    cache holds, for every store it has seen the slice in."""
    found: set[str] = set()
    for store_id in cache.store_ids():
        for _, pack in _cached_packs(cache, store_id, slice_id):
            found |= {r.blob for r in pack_closure(pack) if cache.has(r.blob)}
    return found


def cache_summary(cache: ShardCache) -> list[dict[str, Any]]:
    """Per store seen in the cache: its URL and, per slice, whether its packs are whole.

    The cache holds what stores handed over, so every ref and manifest read here is checked
    as it was on arrival; one that is not rayform's is left out of the summary."""
    out = []
    for store_id in cache.store_ids():
        try:
            info = cache.get_ref(store_id, "store.json") or {}
        except Malformed:
            info = {}
        slices = []
        for key in cache.list_refs(store_id, "refs/slices"):
            sid = key.rsplit("/", 1)[-1].removesuffix(".json")
            packs = []
            for pkey, pack in _cached_packs(cache, store_id, sid):
                blobs = pack_data(pack)
                packs.append({"key": pkey.rsplit("/", 1)[-1].removesuffix(".json"), "fps": pack.fps,
                              "have": sum(cache.has(d) for d in blobs), "of": len(blobs)})
            slices.append({"id": sid, "packs": packs})
        out.append({"store": str(info.get("url", store_id)), "slices": slices})
    return out
