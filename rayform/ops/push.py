"""``rayform push``: a slice's closure copied to another store, e.g. a local store to S3.

The closure is everything training on the slice reads, as ``ops.references`` walks it:
the slice's manifest, each segment version's manifest and data, and its packs; then the
refs that name them: segment refs (the pushed versions merged into the destination's, in
the source's order), pack refs and the slice ref, written last so the destination never has
a ref to a blob it lacks. Ids stay the same: they are content.

Every blob is verified against its name as it is read from the source, before a byte of it
is written; a blob the destination already has is skipped (blobs are immutable and written
atomically, so one that is there is whole). An interrupted push is resumed by pushing again:
what arrived is skipped.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from rayform.client import Client
from rayform.errors import BlobNotFound, IntegrityError, InvalidInput, NotFound, PackNotFound
from rayform.ops.references import pack_closure, slice_closure, unique
from rayform.pack import Pack
from rayform.recordings.slices import Slice

THREADS = 8  # blobs copied at once: object stores answer each request with a latency


@dataclass
class PushReport:
    slice_id: str
    dest: str
    packs: list[Pack] = field(default_factory=list)
    copied: int = 0  # blobs written to the destination
    present: int = 0  # blobs it already had
    bytes: int = 0  # bytes written
    kept: list[str] = field(default_factory=list)  # pack keys the destination holds with another manifest


def push(source: Client, slice_id: str, dest: Client, fps: float | None = None, progress: bool = True,
         threads: int = THREADS, pack: str | None = None) -> PushReport:
    """Copy the slice ``slice_id`` and its packs (the one ``pack`` names, those at ``fps``, or
    all) from ``source`` to ``dest``."""
    if dest.store.id == source.store.id:
        raise InvalidInput(f"push: {dest.store.display} is the store the slice is in; name another store")
    slice_ = source.slices.get(slice_id)
    packs = [source.packs.named(slice_, pack)] if pack is not None else \
        [p for p in source.packs.list(slice_) if fps is None or float(p.fps) == float(fps)]
    if fps is not None and not packs:
        raise PackNotFound(f"{slice_.id}: no pack at {fps:g} fps to push. Its packs: "
                           f"{', '.join(p.key for p in source.packs.list(slice_)) or 'none'}")
    report = PushReport(slice_.id, dest.store.display, packs)
    blobs = unique([*slice_closure(slice_, strict=True), *(r for p in packs for r in pack_closure(p))])
    bar = tqdm(total=len(blobs), unit="blob", desc=f"push {slice_.id}", disable=not progress, leave=False)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for written in pool.map(lambda item: _copy(source, dest, item[0], item[1], slice_.id), blobs.items()):
            if written is None:
                report.present += 1
            else:
                report.copied += 1
                report.bytes += written
            bar.update(1)
    bar.close()
    _push_refs(source, slice_, packs, dest, report)
    return report


def _copy(source: Client, dest: Client, digest: str, what: str, slice_id: str) -> int | None:
    """Copy one blob, verified; its size, or None if the destination had it."""
    where = f"{what} (blob {digest[:16]})"
    try:
        return source.store.copy_to(dest.store, digest)
    except NotFound:
        raise BlobNotFound(f"{where}: missing from {source.store.display}, so it cannot be pushed. "
                           f"Run: rayform verify {slice_id} to see what else is") from None
    except IntegrityError:
        raise IntegrityError(f"{where} in {source.store.display}: its bytes do not match its name; nothing of it "
                             "was pushed. Re-create it from its source") from None


def _push_refs(source: Client, slice_: Slice, packs: list[Pack], dest: Client, report: PushReport) -> None:
    """The refs, once every blob they name is in the destination: segments, packs, the slice."""
    chosen = list(dict.fromkeys((s.id, s.version) for s in slice_.segments))
    rows = source.segments.catalog.rows(chosen)
    # a version only a per-segment ref lists (an older store) has its row made from its manifest
    dest.segments.record_versions([row if row is not None else source.segments.row_of(sid, version, recorded=0)
                                   for (sid, version), row in zip(chosen, rows)])
    for pack in packs:
        key = f"refs/packs/{slice_.id}/{pack.key}.json"
        if _names_another(dest, key, pack.digest):
            report.kept.append(pack.key)
            continue
        dest.store.put_ref(key, {"manifest": pack.digest, "spec": pack.spec.to_manifest(), **_made(source, key)})
    key = f"refs/slices/{slice_.id}.json"
    if _names_another(dest, key, slice_.digest):
        raise InvalidInput(f"push: {dest.store.display} holds another slice under the id {slice_.id}; "
                           "its segments and packs were pushed, its slice ref was not")
    dest.store.put_ref(key, {"id": slice_.id, "manifest": slice_.digest, **_made(source, key)})


def _made(source: Client, key: str) -> dict[str, str]:
    """When the source's ref says it was made (kept in the copy: which pack is newest, which
    slice a name names, is the same there), or nothing where it does not say."""
    made = source.store.get_ref(key).get("created")
    return {"created": made} if isinstance(made, str) and len(made) <= 40 else {}


def _names_another(dest: Client, key: str, manifest: str) -> bool:
    """Whether the destination has a ref at ``key`` naming another manifest than ``manifest``."""
    try:
        theirs = dest.store.get_ref(key)
    except NotFound:
        return False
    return bool(theirs.get("manifest") != manifest)
