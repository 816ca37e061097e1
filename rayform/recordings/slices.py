"""Slices: immutable selections of segment versions, optionally with time ranges.

A slice's id is ``slc_`` plus the first 8 hex of the sha256 of its manifest, longer
where another slice already holds that prefix (as git abbreviates commits).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segment_writer import SegmentRef, check_site
from rayform.recordings.segments import Segments
from rayform.recordings.splits import check_fractions, split_of
from rayform.untrusted import array_list, integer, mapping, string

SLICE_FORMAT = "rayform.slice/1"
ID_HEX = 8


@dataclass(frozen=True, slots=True)  # slots: a slice may hold tens of thousands
class SliceSegment:
    """One segment version in a slice, with the time range taken from it (None: all)."""

    id: str
    version: str
    site: str
    start_ns: int | None = None
    end_ns: int | None = None

    def to_manifest(self) -> dict[str, Any]:
        return {"id": self.id, "version": self.version, "site": self.site,
                "start_ns": self.start_ns, "end_ns": self.end_ns}


SegmentSelector = SegmentRef | SliceSegment | str | Mapping[str, Any]


class Slice:
    """A stored slice. Picklable: it carries how to reopen its store, not an open handle."""

    def __init__(self, store: CachedStore | StoreRef, id: str, digest: str, manifest: Mapping[str, Any]):
        self._store_ref = store.ref if isinstance(store, CachedStore) else store
        self._store = store if isinstance(store, CachedStore) else None
        self.id = id
        self.digest = digest
        what = f"slice manifest {digest[:16]} of {id}"
        if mapping(manifest, what).get("format") != SLICE_FORMAT:
            raise Malformed(f"{what}: format {str(manifest.get('format'))[:40]!r}, not {SLICE_FORMAT}")
        self.name: str | None = string(manifest, "name", what, optional=True)
        self.segments: tuple[SliceSegment, ...] = tuple(
            _slice_segment(s, f"{what}, segment {i}") for i, s in enumerate(array_list(manifest, "segments", what)))

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
        return sorted({s.site for s in self.segments})

    def manifest(self) -> dict[str, Any]:
        return {"format": SLICE_FORMAT, "name": self.name, "segments": [s.to_manifest() for s in self.segments]}

    def segment(self, index: int) -> Segment:
        s = self.segments[index]
        return Segments(self.store).get(s.id, s.version)


def _slice_segment(doc: Any, what: str) -> SliceSegment:
    mapping(doc, what)
    return SliceSegment(
        names.segment_id(doc.get("id"), f"{what}: id"),
        names.digest(doc.get("version"), f"{what}: version"),
        names.site(doc.get("site"), f"{what}: site", trusted=False),
        integer(doc, "start_ns", what, -(1 << 63), (1 << 63) - 1, optional=True),
        integer(doc, "end_ns", what, -(1 << 63), (1 << 63) - 1, optional=True),
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
    ) -> Slice:
        """A slice of the given segments, or of every segment at ``site`` (latest versions).

        A selector is a ``SegmentRef``, a segment id (latest version), ``"seg_…@<version>"``,
        or a mapping with ``id`` and optional ``version``, ``start_ns``, ``end_ns``.
        Creating the same selection twice returns the same slice.
        """
        chosen = [self._resolve(s) for s in segments or ()]
        if site is not None:
            for one in [site] if isinstance(site, str) else site:
                refs = self._segments.list(check_site(one))
                if not refs:
                    raise InvalidInput(f"site {one!r}: no segments in {self.store.display}")
                chosen.extend(SliceSegment(r.id, r.version, r.site) for r in refs)
        if not chosen:
            raise InvalidInput("slice: select at least one segment (segments=... or site=...)")
        seen = set()
        for s in chosen:
            if (s.id, s.version, s.start_ns, s.end_ns) in seen:
                raise InvalidInput(f"slice: {s.id}@{s.version[:8]} selected twice")
            seen.add((s.id, s.version, s.start_ns, s.end_ns))
        manifest = {"format": SLICE_FORMAT, "name": name, "segments": [s.to_manifest() for s in chosen]}
        digest = self.store.put_json_blob(manifest)
        slice_id = self._claim_id(digest)
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
        if isinstance(sel, SegmentRef):
            return SliceSegment(sel.id, sel.version, sel.site)
        if isinstance(sel, str):
            sid, _, version = sel.partition("@")
            sel = {"id": sid, "version": version or None}
        if isinstance(sel, Mapping):
            seg = self._segments.get(sel["id"], sel.get("version"))
            start, end = sel.get("start_ns"), sel.get("end_ns")
            if start is not None and end is not None and end <= start:
                raise InvalidInput(f"slice: {seg.id} time range ends ({end}) before it starts ({start})")
            return SliceSegment(seg.id, seg.version, seg.site,
                                None if start is None else int(start), None if end is None else int(end))
        raise InvalidInput(f"slice: cannot select a segment from {sel!r}")

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
