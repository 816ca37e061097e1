"""Segments: one continuous recording at one site, immutable per version; ``client.segments``.

A segment version is visible once its site's catalog lists it (``catalog``): an ingest
stores its episodes' data (small blobs together in bundles, ``store.bundle``), then appends
one catalog part naming them all, so a thousand episodes are a few objects and one ref, and
an ingest is visible all at once or not at all. Old versions stay readable (their rows are
never removed, their blobs never collected). A store written before catalogs keeps its
per-segment refs (``refs/segments/<site>/<id>.json``), read as rows of the catalog.

Storing a version is ``segment_writer``'s; reading one, ``segment_reader``'s.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.errors import NotFound, RayformError, SegmentNotFound
from rayform.interrupts import held
from rayform.recordings.bundles import open_bundle
from rayform.recordings.catalog import LEGACY, Catalog, catalog_of, part_table
from rayform.recordings.catalog_parts import (
    COLUMNS,
    PREFIX,
    CatalogParts,
    CatalogRow,
    PartRef,
    catalog_row,
    encode_table,
    table_of,
    unique_versions,
)
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segment_writer import SEGMENT_FORMAT, SegmentRef, SegmentWriter, check_site
from rayform.recordings.streams import Stream
from rayform.store.bundle import Bundle
from rayform.store.freshness import NewBlob
from rayform.untrusted import json_document

__all__ = ["Segment", "SegmentRef", "Segments"]

log = logging.getLogger("rayform")


@dataclass(frozen=True)
class Compacted:
    """A site's catalog compacted: the part now standing for the ``replaces`` parts and the
    ``legacy`` per-segment refs folded into it."""

    part: PartRef
    replaces: tuple[str, ...]
    legacy: int


Added = tuple[str, str, Sequence[Stream], Mapping[str, Any] | None]
AUTO_PARTS = 16  # parts a site's catalog may list before an append merges the newest (``_tidy``)


class Segments:
    """``client.segments``: add, get and list segments."""

    def __init__(self, store: CachedStore):
        self.store = store

    @property
    def catalog(self) -> Catalog:
        return catalog_of(self.store)

    def add(
        self,
        site: str,
        name: str,
        streams: Sequence[Stream],
        meta: Mapping[str, Any] | None = None,
        *,
        allow_nonfinite: bool = False,
    ) -> SegmentRef:
        """Store a segment; returns its id and version (the same version if nothing changed).
        A NaN or infinity in a float array stream is refused (naming the stream and its first
        such row) unless ``allow_nonfinite``; packs' statistics then leave them out."""
        return self.add_many([(site, name, streams, meta)], allow_nonfinite=allow_nonfinite)[0]

    def add_many(self, segments: Sequence[Added], *, allow_nonfinite: bool = False) -> list[SegmentRef]:
        """Store several segments all or nothing: every one is checked and its data stored
        before any becomes visible (one catalog part per site lists them all). A failure takes
        back the blobs this call wrote (none of them was visible yet), so the store is left as
        it was."""
        with self.writing() as refs:
            refs += self.store_many(segments, allow_nonfinite=allow_nonfinite)
        return refs

    @contextlib.contextmanager
    def writing(self) -> Iterator[list[SegmentRef]]:
        """A write of segments stored as they come (``store_many``, the refs added to the list
        this yields), none visible until the block ends: then its blobs are confirmed and the
        refs recorded at once (a Ctrl-C waits for it). A failure or a Ctrl-C anywhere takes back
        the blobs this write stored, so the store is left as it was."""
        committed = False  # a Ctrl-C held through the commit is answered after it: then nothing is taken back
        with self.store.recording_new_blobs() as written:
            try:
                refs: list[SegmentRef] = []
                yield refs
                self.confirm(written)
                with held():  # the commit: one part per site, whole
                    self.record(refs)
                    committed = True
            except BaseException:
                if not committed:
                    self.discard(written)
                raise

    def store_many(self, segments: Sequence[Added], *, allow_nonfinite: bool = False) -> list[SegmentRef]:
        """Check and store each segment's data and manifest, making none visible yet: what
        ``record`` does (an ingest stores every source before it records any)."""
        writer = SegmentWriter(self.store)
        for site, name, streams, meta in segments:
            writer.put(site, name, streams, meta, allow_nonfinite)
        return writer.finish()

    def confirm(self, written: Sequence[NewBlob]) -> None:
        """Check, right before a commit, that every blob the write stored or found is still
        there, and freshen it so that a gc deciding from now on keeps it (a few: small ones are
        in bundles): a gc with a grace shorter than the write (``gc --force``) may have deleted
        one, and a commit naming it would lose its data."""
        self.store.confirm_committed(dict.fromkeys(b.digest for b in written), "this write")

    def record(self, refs: Sequence[SegmentRef]) -> None:
        """Make stored segment versions visible: each becomes its segment's latest (one catalog
        part per site, written at once)."""
        rows = [ref.row if ref.row is not None else self.row_of(ref.id, ref.version) for ref in refs]
        if not rows:
            return
        written = CatalogParts(self.store).append(rows)
        for part in written:  # the versions are in: tidying is a favour to readers, never a failure of this
            try:
                self._tidy(part.site)
            except RayformError as e:
                log.warning("rayform: site %s: could not merge its newest catalog parts (%s); "
                            "rayform segments compact does it once that is mended", part.site, e)

    def _tidy(self, site: str) -> None:
        """Keep a site's catalog a few parts, as an LSM tree keeps its runs: once more than
        ``AUTO_PARTS`` are listed, the newest ones are merged, each part older than those merged
        being at least as large as all of them (so parts grow geometrically, and every row is
        rewritten about log(n) times over a collection's life). Costs one listing an append."""
        if sum(1 for _ in self.store.list_refs(f"{PREFIX}/{site}")) <= AUTO_PARTS:
            return
        parts = self.catalog.parts.live(site)
        tail = [parts[-1]]
        for part in reversed(parts[:-1]):
            if part.rows > sum(t.rows for t in tail):
                break
            tail.insert(0, part)
        if len(tail) > 1:
            self.compact(site, tail, fold_legacy=False)

    def row_of(self, segment_id: str, version: str, recorded: int | None = None) -> CatalogRow:
        """The catalog row of a stored version, read from its manifest (a version stored by a
        writer that did not keep it: pushed, or folded in from a per-segment ref)."""
        seg = self.get(segment_id, version)
        return catalog_row(seg.id, seg.name, seg.site, seg.version, seg.bundle.digest if seg.bundle else None,
                           time.time_ns() if recorded is None else recorded, seg.meta,
                           {n: (info, seg.timestamps(n)) for n, info in seg.streams.items()})

    def discard(self, blobs: Sequence[NewBlob]) -> None:
        """Take back blobs a failed write stored (new ones, that nothing visible names yet; one
        another writer has freshened since is its now, and stays: ``store.freshness``)."""
        if not blobs:  # nothing to take back: no store to reach (an offline one refuses every write)
            return
        try:
            self.store.take_back(blobs)
        except RayformError as e:  # left to `rayform gc`, which finds them unreachable
            log.warning("rayform: could not take back the %d blobs of a failed write: %s", len(blobs), e)

    def get(self, segment_id: str, version: str | None = None, bundle: str | None = None) -> Segment:
        """A segment version (the latest when ``version`` is None); ``bundle``, where the caller
        knows the bundle holding it (a slice does), saves looking it up in the catalog."""
        if not isinstance(segment_id, str) or not names.SEGMENT_ID.fullmatch(segment_id):
            raise SegmentNotFound(f"{str(segment_id)[:80]!r}: not a segment id (they look like seg_0123456789ab)")
        if version is None:
            version = self.versions(segment_id)[-1]
        manifest, opened = self.manifest(segment_id, version, bundle)
        return Segment(self.store, version, manifest, opened)

    def manifest(self, segment_id: str, version: str, bundle: str | None = None) -> tuple[dict[str, Any], Bundle | None]:
        """A version's manifest as stored (its format and id checked, nothing more: ``get``
        reads the rest), and the bundle it came out of."""
        if not isinstance(version, str) or not names.DIGEST.fullmatch(version):
            raise SegmentNotFound(f"{segment_id}@{str(version)[:80]}: not a segment version (64 hex)")
        if bundle is None:
            where = self.catalog.locate(segment_id, version)
            bundle = where.bundle if where is not None else None
        what = f"segment manifest of {segment_id}"
        opened = open_bundle(self.store, bundle) if bundle is not None else None
        try:
            if opened is not None:
                manifest = json_document(bytes(opened.get(version)), f"{what} {version[:16]} in {self.store.display}")
            else:  # a loose manifest: a store written before bundles, or a version no catalog lists
                manifest = self.store.get_json_blob(version, what)
        except (NotFound, KeyError):
            raise SegmentNotFound(
                f"{segment_id}@{version[:12]}: no such segment version in {self.store.display}"
            ) from None
        if manifest.get("format") != SEGMENT_FORMAT or manifest.get("id") != segment_id:
            raise SegmentNotFound(f"{segment_id}@{version[:12]}: that blob is not this segment")
        return manifest, opened

    def versions(self, segment_id: str, site: str | None = None) -> list[str]:
        """All versions of a segment, oldest first (``site`` is accepted for callers that know it)."""
        del site
        found = self.catalog.versions(names.segment_id(segment_id, trusted=True))
        if not found:
            raise SegmentNotFound(f"{segment_id}: no such segment in {self.store.display}")
        return found

    def list(self, site: str | None = None) -> list[SegmentRef]:
        """The latest version of every segment, at one site or at all of them."""
        table = self.catalog.latest(check_site(site) if site else None, ["site", "id", "name", "version"])
        refs = [SegmentRef(i, v, s, n) for s, i, n, v in zip(*(table.column(c).to_pylist()
                                                             for c in ("site", "id", "name", "version")))]
        return sorted(refs, key=lambda r: (r.site, r.name))

    def sites(self) -> builtins.list[str]:
        return self.catalog.sites()

    def compact(self, site: str, parts: Sequence[PartRef] | None = None, fold_legacy: bool = True) -> Compacted | None:
        """Fold a site's live catalog parts (or the consecutive run ``parts`` of them), and the
        per-segment refs of an older store, into one part (rows kept in their order; a
        per-segment ref's versions read from their manifests once, and its ref then removed:
        this rayform and later ones read the part). None if the site has one part and no such
        refs already."""
        import pyarrow as pa

        site = check_site(site)
        catalog = self.catalog
        parts = list(parts) if parts is not None else catalog.parts.live(site)
        legacy = catalog.legacy_refs(site) if fold_legacy else []
        if len(parts) <= 1 and not legacy:
            return None
        folded = [self.row_of(sid, v, recorded=i) for sid, _, _, versions in legacy for i, v in enumerate(versions)]
        tables = ([table_of(folded)] if folded else []) + [part_table(self.store, p) for p in parts]
        merged = unique_versions(pa.concat_tables([t.select(list(COLUMNS)) for t in tables]))
        keys = [f"{LEGACY}/{site}/{sid}.json" for sid, _, _, _ in legacy]
        part = catalog.parts.compact(site, encode_table(merged), merged.num_rows, parts, keys)
        return Compacted(part, tuple(p.key for p in parts), len(legacy))

    def record_versions(self, rows: Sequence[CatalogRow]) -> None:
        """Make versions another store recorded visible here as they were there (``rayform
        push``): their rows keep when they were recorded, so a pushed old version never
        becomes the latest. A version already listed here is not listed again."""
        listed = self.catalog.table(columns=["id", "version"])
        have = set(zip(listed.column("id").to_pylist(), listed.column("version").to_pylist()))
        fresh = [r for r in rows if (r.id, r.version) not in have]
        if fresh:
            CatalogParts(self.store).append(fresh)
