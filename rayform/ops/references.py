"""What an object of a store references: the one answer ``gc``, ``push``, ``pull``, ``verify``
and the cache's accounting use, and nothing else.

A store's roots are its refs. Each kind of object names blobs, and only these functions say
which:

- a **segment version**: its manifest, or the bundle holding it (``store.bundle``: its small
  arrays are members too), and each of its streams' blobs that are not in that bundle, as
  the stream entry declares them (``StreamInfo.blobs``: timestamps, data chunks, frame sizes,
  a video's packet index; anything a new kind of stream adds is declared there, and a test
  stores every kind and checks that what was written is what this walk reaches);
- a **slice**: its manifest and every segment version it selects;
- a **pack**: its manifest, shards (a video pack's clips are shard members), offset index,
  chunk digests and, for a large slice's, its segments' entries (its statistics are in the
  manifest);
- a **catalog part**: its Parquet blob, and every version its rows list;
- a **store**: every slice, pack and catalog part ref's closure, and every version every
  per-segment ref of an older store lists (old versions stay readable).

A manifest that cannot be read reaches nothing more. What a caller does about that is its
own: ``verify`` reports the manifest itself (it is in the walk), ``gc`` and ``push`` pass
``strict`` and stop, since deleting or copying on a guess loses data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.errors import NotFound, RayformError
from rayform.pack import Pack, Packs
from rayform.recordings.catalog import catalog_of
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice, Slices


class Reference(NamedTuple):
    """A blob an object names, and where it belongs (for messages: ``segment seg_… stream cam0
    packet index``); ``bundle``: the blob is a bundle (whose members ``verify`` checks too);
    ``error``: why the object naming it could not be read (a walk that is not ``strict``
    reports it so, and goes on)."""

    blob: str
    what: str
    bundle: bool = False
    error: str | None = None


def segment_version(store: CachedStore, segment_id: str, version: str, *, bundle: str | None = None,
                    located: bool = False, strict: bool = False) -> Iterator[Reference]:
    """A segment version's manifest, or the bundle holding it (``bundle``, or where the catalog
    says unless ``located``: then None is a loose manifest), and every blob its streams name
    that is not in that bundle."""
    if bundle is None and not located:
        where = catalog_of(store).locate(segment_id, version)
        bundle = where.bundle if where is not None else None
    what = f"segment {segment_id} {'bundle' if bundle else 'manifest'}"
    yield Reference(bundle or version, what, bundle=bundle is not None)
    try:
        seg = Segments(store).get(segment_id, version, bundle=bundle)
    except RayformError as e:
        if strict and not isinstance(e, NotFound):
            raise
        # reaches nothing more; said, so that no walk passes over a version it could not read
        yield Reference(bundle or version, what, bundle=bundle is not None, error=f"unreadable: {e}")
        return
    for name, info in seg.streams.items():
        for blob, role in info.blobs():
            if seg.bundle is None or blob not in seg.bundle:
                yield Reference(blob, f"segment {segment_id} stream {name} {role}")


def slice_closure(slice_: Slice, *, strict: bool = False) -> Iterator[Reference]:
    """A slice's manifest and every segment version it selects, with what those name."""
    yield Reference(slice_.digest, f"{slice_.id} manifest")
    if slice_.table_blob is not None:
        yield Reference(slice_.table_blob, f"{slice_.id} segments table")
    for s in slice_.segments:  # as they come: a table of millions is never held whole (its blobs dedupe)
        yield from segment_version(slice_.store, s.id, s.version, bundle=s.bundle, strict=strict)


def pack_closure(pack: Pack) -> Iterator[Reference]:
    """A pack's manifest, shards, offset index and chunk digests."""
    yield Reference(pack.digest, f"pack {pack.key} manifest")
    for i, shard in enumerate(pack.shards):
        yield Reference(shard.sha256, f"pack {pack.key} shard {i}")
    yield Reference(pack.index_blob, f"pack {pack.key} index")
    if pack.chunk_blob is not None:
        yield Reference(pack.chunk_blob, f"pack {pack.key} chunk digests")
    if pack.segments_blob is not None:
        yield Reference(pack.segments_blob, f"pack {pack.key} segments")


def pack_data(pack: Pack) -> list[str]:
    """What a pack's readers fetch beyond its manifest: its shards, index and chunk digests."""
    return [r.blob for r in pack_closure(pack) if r.blob != pack.digest]


def store_closure(store: CachedStore, *, strict: bool = True) -> Iterator[Reference]:
    """Everything the store's refs reach: every slice, every pack (of any slice), every catalog
    part and every version its rows list (which names its bundle), every version a per-segment
    ref lists. ``strict`` (gc's): a ref or manifest that cannot be read raises; else the
    manifest is yielded and reaches nothing more (see the module's docstring)."""
    slices, packs, catalog = Slices(store), Packs(store), catalog_of(store)
    for sid, digest, _ in slices.refs():
        try:
            yield from slice_closure(slices.get(sid), strict=strict)
        except RayformError as e:
            if strict:
                raise
            yield from _unreadable_slice(store, sid, digest, e)
    for ref in packs.refs():
        try:
            yield from pack_closure(packs.read(ref))
        except RayformError as e:
            if strict:
                raise
            yield Reference(ref.manifest, f"pack {ref.key} of {ref.slice_id} manifest")
            yield Reference(ref.manifest, f"pack {ref.key} of {ref.slice_id} manifest", error=f"unreadable: {e}")
    for blob in catalog.part_blobs():
        yield Reference(blob.digest, blob.what)
    # a walk that is not strict names each part it cannot read (verify never vouches for a
    # catalog it could not read) and goes on with the rows of the others
    places, unreadable = catalog.places(strict)
    for blob in unreadable:
        yield Reference(blob.digest, blob.what, error=blob.error)
    # each row's own bundle: a version two rows place apart (a hostile part) is walked in both
    for segment_id, version, bundle in places:
        yield from segment_version(store, segment_id, version, bundle=bundle, located=True, strict=strict)


def _unreadable_slice(store: CachedStore, sid: str, digest: str, error: RayformError) -> Iterator[Reference]:
    """A slice that cannot be read: its manifest, and its segments table where the manifest
    names one, with the error on the one that fails (a corrupt table is not a bad manifest)."""
    yield Reference(digest, f"{sid} manifest")
    unreadable = f"unreadable: {error}"
    try:
        manifest = store.get_json_blob(digest, f"slice manifest of {sid}")
        table = names.digest(manifest.get("table"), f"slice manifest of {sid}: table") \
            if isinstance(manifest, dict) and "table" in manifest else None
    except RayformError:
        table = None
    if table is not None:
        yield Reference(table, f"{sid} segments table")
        try:
            store.get_blob(table, f"segments table of {sid}")
        except RayformError:
            yield Reference(table, f"{sid} segments table", error=unreadable)
            return
    yield Reference(digest, f"{sid} manifest", error=unreadable)


def unique(references: Iterable[Reference]) -> dict[str, str]:
    """Each blob once, with the first place it was found (a blob two objects name is one blob)."""
    out: dict[str, str] = {}
    for r in references:
        if r.error is None:
            out.setdefault(r.blob, r.what)
    return out
