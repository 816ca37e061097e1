"""Slices: immutable selections of segment versions, optionally with time ranges.

A slice's id is ``slc_`` plus the first 8 hex of the sha256 of its manifest, longer
where another slice already holds that prefix (as git abbreviates commits).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rayform import names
from rayform.cache.store_view import CachedStore, StoreRef
from rayform.errors import (
    InvalidInput,
    Malformed,
    NotFound,
    OfflineError,
    SliceNotFound,
    fixed_by,
)
from rayform.recordings import query
from rayform.recordings.catalog import hex_bytes
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segment_writer import SegmentRef, check_site
from rayform.recordings.segments import Segments
from rayform.recordings.slice_table import TABLE_AT, UNTAKEN, Columns, SliceSegment, SliceSegments
from rayform.recordings.splits import check_fractions, split_of
from rayform.store.content import canonical_json
from rayform.untrusted import array_list, integer, mapping, string

__all__ = ["Slice", "SliceSegment", "SliceSegments", "Slices"]

SLICE_FORMAT = "rayform.slice/1"  # its segments in the manifest
TABLE_SLICE_FORMAT = "rayform.slice/2"  # its segments in a table blob (``slice_table``)
ID_HEX = 8


SegmentSelector = SegmentRef | SliceSegment | str | Mapping[str, Any]


class Slice:
    """A stored slice. Picklable: it carries how to reopen its store, not an open handle."""

    def __init__(self, store: CachedStore | StoreRef, id: str, digest: str, manifest: Mapping[str, Any]):
        self._store_ref = store.ref if isinstance(store, CachedStore) else store
        self._store = store if isinstance(store, CachedStore) else None
        self.id = id
        self.digest = digest
        what = f"slice manifest {digest[:16]} of {id}"
        form = mapping(manifest, what).get("format")
        if form not in (SLICE_FORMAT, TABLE_SLICE_FORMAT):
            raise Malformed(f"{what}: format {str(form)[:40]!r}, not {SLICE_FORMAT} or {TABLE_SLICE_FORMAT}")
        self.name: str | None = string(manifest, "name", what, optional=True)
        self.table_blob: str | None = None  # a large slice's segments table (``slice_table``)
        if form == SLICE_FORMAT:
            self.segments = SliceSegments([_slice_segment(s, f"{what}, segment {i}")
                                           for i, s in enumerate(array_list(manifest, "segments", what))])
        else:
            self.table_blob = names.digest(manifest.get("table"), f"{what}: table")
            self.segments = SliceSegments(table=self.store.get_blob(self.table_blob, f"segments table of {id}"), what=what)
            if len(self.segments) != integer(manifest, "count", what, 1, 1 << 40):
                raise Malformed(f"{what}: its table holds {len(self.segments)} segments, it claims {manifest.get('count')}")

    def __repr__(self) -> str:
        return f"Slice({self.id!r}, name={self.name!r}, segments={len(self.segments)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Slice) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __reduce__(self) -> tuple[Callable[..., Slice], tuple[StoreRef, str, str, dict[str, Any]]]:
        return (_rebuild_slice, (self._store_ref, self.id, self.digest, self.manifest()))

    @property
    def store(self) -> CachedStore:
        if self._store is None:
            self._store = self._store_ref.open()
        return self._store

    @property
    def store_ref(self) -> StoreRef:
        return self._store_ref

    @property
    def sites(self) -> list[str]:
        return self.segments.sites

    def manifest(self) -> dict[str, Any]:
        """The manifest as stored."""
        return _manifest(self.name, list(self.segments) if self.table_blob is None else None, self.table_blob,
                         len(self.segments))

    def segment(self, index: int) -> Segment:
        s = self.segments[index]
        return Segments(self.store).get(s.id, s.version, bundle=s.bundle)


def _manifest(name: str | None, listed: Sequence[SliceSegment] | None, table: str | None, count: int) -> dict[str, Any]:
    if table is None:
        assert listed is not None
        return {"format": SLICE_FORMAT, "name": name, "segments": [s.to_manifest() for s in listed]}
    return {"format": TABLE_SLICE_FORMAT, "name": name, "count": count, "table": table}


def _slice_segment(doc: Any, what: str) -> SliceSegment:
    mapping(doc, what)
    return SliceSegment(
        names.segment_id(doc.get("id"), f"{what}: id"),
        names.digest(doc.get("version"), f"{what}: version"),
        names.site(doc.get("site"), f"{what}: site", trusted=False),
        integer(doc, "start_ns", what, -(1 << 63), (1 << 63) - 1, optional=True),
        integer(doc, "end_ns", what, -(1 << 63), (1 << 63) - 1, optional=True),
        None if doc.get("bundle") is None else names.digest(doc.get("bundle"), f"{what}: bundle"),
    )


def _rebuild_slice(store_ref: StoreRef, id: str, digest: str, manifest: dict[str, Any]) -> Slice:
    return Slice(store_ref, id, digest, manifest)


def _ref_manifest(ref: Any, slice_id: str, what: str) -> str:
    """The manifest digest a slice ref names, after checking the ref is this slice's."""
    return str(_checked_ref(ref, slice_id, what)["manifest"])


def _checked_ref(ref: Any, slice_id: str, what: str) -> dict[str, str]:
    """A slice ref: its manifest digest and when it was written (ISO 8601 UTC, "" if not said)."""
    if mapping(ref, what).get("id") != slice_id:
        raise Malformed(f"{what}: names the slice {str(ref.get('id'))[:80]!r}, not {slice_id}")
    created = ref.get("created", "")
    if not isinstance(created, str) or len(created) > 40:
        raise Malformed(f"{what}: created {str(created)[:40]!r} is not a time")
    return {"manifest": names.digest(ref.get("manifest"), f"{what}: manifest"), "created": created}


class Slices:
    """``client.slices``: create, get and list slices."""

    def __init__(self, store: CachedStore):
        self.store = store
        self._segments = Segments(store)

    def create(
        self,
        segments: Iterable[SegmentSelector] | None = None,
        *,
        site: str | Sequence[str] | None = None,
        name: str | None = None,
        where: str | None = None,
    ) -> Slice:
        """A slice of the given segments, and of every segment at ``site`` (latest versions) or,
        with ``where``, of those a query over the catalog selects (``recordings.query``:
        ``"task ~ 'pick' and duration > 10 and meta.success"``; at every site unless ``site``
        says which), in the order of their site and name.

        A selector is a ``SegmentRef``, a segment id (latest version), ``"seg_…@<version>"``,
        or a mapping with ``id`` and optional ``version``, ``start_ns``, ``end_ns``.
        Creating the same selection twice returns the same slice, and the same query over the
        same catalog the same slice.
        """
        chosen = [self._resolve(s) for s in segments or ()]
        columns = [Columns.of(chosen)] if chosen else []
        if site is not None or where is not None:
            columns.append(self._selected(site, where))
        if not columns:
            raise InvalidInput("slice: select at least one segment (segments=..., site=... or where=...)")
        selection = Columns.concat(columns) if len(columns) > 1 else columns[0]
        twice = selection.duplicate()
        if twice is not None:
            s = selection.segments()[twice] if len(selection) < TABLE_AT else SliceSegments(table=selection.encode())[twice]
            raise InvalidInput(f"slice: {s.id}@{s.version[:8]} selected twice")
        written: dict[str, bytes | None] = {}  # blob -> its bytes, confirmed once the ref names them
        if len(selection) >= TABLE_AT:  # a table blob: no list of a million objects, here or in a reader
            encoded = selection.encode()
            stored = self.store.put_blob(encoded)
            written[stored] = encoded
            table, listed = stored, None
        else:
            table, listed = None, selection.segments()
        manifest = _manifest(name, listed, table, len(selection))
        data = canonical_json(manifest)
        digest = self.store.put_blob(data)
        written[digest] = data
        slice_id = self._claim_id(digest)
        # the ref reaches them from now on; a gc that decided before may have deleted one meanwhile
        self.store.confirm_committed(written, f"slice {slice_id}")
        return Slice(self.store, slice_id, digest, manifest)

    def get(self, slice_id: str) -> Slice:
        """The slice with this id, or with this name (the newest of that name: a name is not
        unique, an id is); SliceNotFound (a KeyError) naming what was asked and the store."""
        if isinstance(slice_id, str) and slice_id and not names.SLICE_ID.fullmatch(slice_id) \
                and not slice_id.startswith("slc_"):
            return self._named(slice_id)
        if not isinstance(slice_id, str) or not names.SLICE_ID.fullmatch(slice_id):
            raise SliceNotFound(f"{str(slice_id)[:80]!r}: not a slice id (they look like slc_7c1e04aa) or name")
        what = f"ref of {slice_id} in {self.store.display}"
        try:
            with fixed_by(f"Run: rayform pull {slice_id}", OfflineError):
                digest = self.store.get_ref(f"refs/slices/{slice_id}.json",
                                            parse=lambda r: _ref_manifest(r, slice_id, what))
        except NotFound:
            raise SliceNotFound(
                f"{slice_id}: no such slice in {self.store.display}. "
                "List them with: rayform slices ls"
            ) from None
        manifest = self.store.get_json_blob(digest, f"slice manifest of {slice_id}")
        return Slice(self.store, slice_id, digest, manifest)

    def _named(self, name: str) -> Slice:
        """The newest slice named ``name`` (by when its ref was written; a slice made before
        refs said so counts as oldest)."""
        found = [(created, s) for created, s in self._listed() if s.name == name]
        if not found:
            raise SliceNotFound(f"{name[:80]!r}: no slice has this name or id in {self.store.display}. "
                                "List them with: rayform slices ls")
        return max(found, key=lambda item: item[0])[1]

    def split(self, slice_: Slice | str, fractions: Mapping[str, float], seed: int = 0) -> dict[str, Slice]:
        """Segment-disjoint child slices of ``slice_``, e.g. ``{"train": 0.9, "val": 0.1}``.

        Each segment goes to a split by the hash of (seed, segment id) (``recordings.splits``):
        the same call gives the same slices, and adding segments never moves an existing one.
        A child is named ``<parent name or id>-<split>``; a split that gets no segment is an error."""
        parent = self.get(slice_) if isinstance(slice_, str) else slice_
        shares = check_fractions(fractions)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidInput(f"split seed {str(seed)[:40]!r}: a whole number")
        chosen: dict[str, list[SliceSegment]] = {name: [] for name in shares}
        for s in parent.segments:
            chosen[split_of(s.id, shares, seed)].append(s)
        for name, segments in chosen.items():
            if not segments:
                raise InvalidInput(f"{parent.id}: split {name} ({shares[name]:g}) got none of its "
                                   f"{len({s.id for s in parent.segments})} segments. Give it a larger share, or "
                                   "split a slice with more segments")
        return {name: self.create(segments, name=f"{parent.name or parent.id}-{name}")
                for name, segments in chosen.items()}

    def list(self) -> list[Slice]:
        """Every slice of the store, by id."""
        return [s for _, s in self._listed()]

    def _listed(self) -> Iterator[tuple[str, Slice]]:
        """Each slice with when its ref was written (ISO 8601; "" where the ref predates that)."""
        for sid, digest, created in self.refs():
            manifest = self.store.get_json_blob(digest, f"slice manifest of {sid}")
            yield created, Slice(self.store, sid, digest, manifest)

    def refs(self) -> Iterator[tuple[str, str, str]]:
        """``(slice id, manifest digest, when its ref was written)`` of every slice ref, the
        manifests not read (``ops.references`` walks a store that may hold a bad one)."""
        for key in self.store.list_refs("refs/slices"):
            sid = key.rsplit("/", 1)[-1][: -len(".json")]
            if key.count("/") == 2 and names.SLICE_ID.fullmatch(sid):
                what = f"ref of {sid} in {self.store.display}"
                ref = self.store.get_ref(key, parse=functools.partial(_checked_ref, slice_id=sid, what=what))
                yield sid, ref["manifest"], ref["created"]

    # -- internals ---------------------------------------------------------------------
    def _resolve(self, sel: SegmentSelector) -> SliceSegment:
        if isinstance(sel, SliceSegment):
            return sel
        if isinstance(sel, SegmentRef):  # just stored, it says its bundle; else the catalog does
            bundle = sel.row.bundle if sel.row is not None else self._bundle(sel.id, sel.version)
            return SliceSegment(sel.id, sel.version, sel.site, bundle=bundle)
        if isinstance(sel, str):
            sid, _, version = sel.partition("@")
            sel = {"id": sid, "version": version or None}
        if isinstance(sel, Mapping):
            seg = self._segments.get(sel["id"], sel.get("version"))
            start, end = sel.get("start_ns"), sel.get("end_ns")
            if start is not None and end is not None and end <= start:
                raise InvalidInput(f"slice: {seg.id} time range ends ({end}) before it starts ({start})")
            return SliceSegment(seg.id, seg.version, seg.site, None if start is None else int(start),
                                None if end is None else int(end), seg.bundle.digest if seg.bundle else None)
        raise InvalidInput(f"slice: cannot select a segment from {sel!r}")

    def _selected(self, site: str | Sequence[str] | None, where: str | None) -> Columns:
        """The latest version of every segment at ``site`` (every site: None) that ``where``
        selects, by site and name: one read of the catalog, one pass of the query."""
        import pyarrow as pa
        import pyarrow.compute as pc

        q = query.Query(where) if where is not None else None  # a bad query is said before the catalog is read
        sites = None if site is None else [check_site(s) for s in ([site] if isinstance(site, str) else site)]
        catalog = self._segments.catalog
        table = catalog.select(columns=[*query.COLUMNS_READ, "bundle"])
        if sites is not None:
            table = table.filter(pc.is_in(table.column("site"), value_set=pa.array(sites, pa.string())))
            have = set(pc.unique(table.column("site")).to_pylist())
            for one in sites:
                if one not in have:
                    raise InvalidInput(f"site {one!r}: no segments in {self.store.display}")
        total = table.num_rows
        if q is not None:
            table = q.select(table)
            if not table.num_rows:
                raise InvalidInput(f"where {where!r}: selects none of the {total} segments"
                                   + (f" at {', '.join(sites)}" if sites else "") + ". See: rayform segments ls --where …")
        table = table.sort_by([("site", "ascending"), ("name", "ascending")])
        site_codes = pc.dictionary_encode(table.column("site")).combine_chunks()
        versions = hex_bytes(table.column("version").to_pylist(), 32)
        bundles, bundle = catalog.bundles_of(versions)
        none = np.full(table.num_rows, UNTAKEN, np.int64)  # whole segments: no time range taken
        return Columns(hex_bytes([i[4:] for i in table.column("id").to_pylist()], 6), versions,
                       site_codes.indices.to_numpy(zero_copy_only=False).astype(np.int32),
                       site_codes.dictionary.to_pylist(), bundle, list(bundles), none, none.copy())

    def _bundle(self, segment_id: str, version: str) -> str | None:
        """Where a version's manifest is: the first bundle the catalog lists it in (the same
        selection makes the same slice, whatever was ingested since), None for a loose one."""
        where = self._segments.catalog.locate(segment_id, version)
        return where.bundle if where is not None else None

    def _claim_id(self, digest: str) -> str:
        """The slice id of manifest ``digest``; its ref is (re)written with the time, so a name
        names the slice made last under it (``get``)."""
        for n in range(ID_HEX, len(digest) + 1):
            slice_id = "slc_" + digest[:n]
            key = f"refs/slices/{slice_id}.json"
            what = f"ref of {slice_id} in {self.store.display}"
            try:
                existing = self.store.get_ref(key, parse=functools.partial(_ref_manifest, slice_id=slice_id, what=what))
            except NotFound:
                existing = digest
            if existing == digest:
                created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
                self.store.put_ref(key, {"id": slice_id, "manifest": digest, "created": created})
                return slice_id
        raise AssertionError("unreachable: a full digest cannot collide with another")
