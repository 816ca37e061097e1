"""Segments: one continuous recording at one site, immutable per version; ``client.segments``.

A segment's ref (``refs/segments/<site>/<id>.json``) lists its versions, oldest first: it is
what makes a stored version visible, and old versions stay readable (their blobs are never
deleted). Storing a version is ``segment_writer``'s; reading one, ``segment_reader``'s.
"""

from __future__ import annotations

import builtins
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from rayform import names
from rayform.cache.store_view import CachedStore
from rayform.errors import Malformed, NotFound, RayformError, SegmentNotFound
from rayform.recordings.segment_reader import Segment
from rayform.recordings.segment_writer import SEGMENT_FORMAT, SegmentRef, SegmentWriter, check_site
from rayform.recordings.streams import Stream
from rayform.store.freshness import NewBlob
from rayform.untrusted import array_list, mapping, string

__all__ = ["Segment", "SegmentRef", "Segments"]

log = logging.getLogger("rayform")


class Segments:
    """``client.segments``: add, get and list segments."""

    def __init__(self, store: CachedStore):
        self.store = store

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

    def add_many(self, segments: Sequence[tuple[str, str, Sequence[Stream], Mapping[str, Any] | None]], *,
                 allow_nonfinite: bool = False) -> list[SegmentRef]:
        """Store several segments all or nothing: every one is checked and its data stored
        before the first becomes visible (its ref is written). A failure takes back the blobs
        this call wrote (none of them was visible yet), so the store is left as it was."""
        with self.store.recording_new_blobs() as written:
            try:
                refs = self.store_many(segments, allow_nonfinite=allow_nonfinite)
            except BaseException:
                self.discard(written)
                raise
        self.record(refs)
        return refs

    def store_many(self, segments: Sequence[tuple[str, str, Sequence[Stream], Mapping[str, Any] | None]], *,
                   allow_nonfinite: bool = False) -> list[SegmentRef]:
        """Check and store each segment's data and manifest, making none visible yet: what
        ``record`` does (an ingest stores every source before it records any)."""
        writer = SegmentWriter(self.store)
        return [writer.put(site, name, streams, meta, allow_nonfinite) for site, name, streams, meta in segments]

    def record(self, refs: Sequence[SegmentRef]) -> None:
        """Make stored segment versions visible: each becomes its segment's latest."""
        for ref in refs:
            self._record_version(ref.id, ref.site, ref.name, ref.version)

    def discard(self, blobs: Sequence[NewBlob]) -> None:
        """Take back blobs a failed write stored (new ones, that nothing visible names yet; one
        another writer has freshened since is its now, and stays: ``store.freshness``)."""
        try:
            self.store.take_back(blobs)
        except RayformError as e:  # left to `rayform gc`, which finds them unreachable
            log.warning("rayform: could not take back the %d blobs of a failed write: %s", len(blobs), e)

    def get(self, segment_id: str, version: str | None = None) -> Segment:
        """A segment version (the latest when ``version`` is None)."""
        if not isinstance(segment_id, str) or not names.SEGMENT_ID.fullmatch(segment_id):
            raise SegmentNotFound(f"{str(segment_id)[:80]!r}: not a segment id (they look like seg_0123456789ab)")
        if version is None:
            versions = self.versions(segment_id)
            version = versions[-1]
        elif not isinstance(version, str) or not names.DIGEST.fullmatch(version):
            raise SegmentNotFound(f"{segment_id}@{str(version)[:80]}: not a segment version (64 hex)")
        try:
            manifest = self.store.get_json_blob(version, f"segment manifest of {segment_id}")
        except NotFound:
            raise SegmentNotFound(
                f"{segment_id}@{version[:12]}: no such segment version in {self.store.display}"
            ) from None
        if manifest.get("format") != SEGMENT_FORMAT or manifest.get("id") != segment_id:
            raise SegmentNotFound(f"{segment_id}@{version[:12]}: that blob is not this segment")
        return Segment(self.store, version, manifest)

    def versions(self, segment_id: str, site: str | None = None) -> list[str]:
        """All versions of a segment, oldest first (``site``, where known, saves a listing)."""
        if site is not None:
            key = f"refs/segments/{check_site(site)}/{names.segment_id(segment_id, trusted=True)}.json"
            try:
                found: list[str] = self.store.get_ref(key, parse=lambda r: self._parse_ref(r, key))["versions"]
                return found
            except NotFound:
                pass
        result: list[str] = self._ref(segment_id)["versions"]
        return result

    def list(self, site: str | None = None) -> list[SegmentRef]:
        """The latest version of every segment, at one site or at all of them."""
        prefix = f"refs/segments/{check_site(site)}" if site else "refs/segments"
        out = []
        for key in self.store.list_refs(prefix):
            parts = key.split("/")
            if len(parts) == 4 and names.SEGMENT_ID.fullmatch(parts[3].removesuffix(".json")):
                ref = self.store.get_ref(key, parse=functools.partial(self._parse_ref, key=key))
                out.append(SegmentRef(ref["id"], ref["versions"][-1], ref["site"], ref["name"]))
        return sorted(out, key=lambda r: (r.site, r.name))

    def sites(self) -> builtins.list[str]:
        return sorted({r.site for r in self.list()})

    # -- internals ---------------------------------------------------------------------
    def _ref(self, segment_id: str) -> dict[str, Any]:
        for key in self.store.list_refs("refs/segments"):
            if key.endswith(f"/{segment_id}.json"):
                result: dict[str, Any] = self.store.get_ref(key, parse=functools.partial(self._parse_ref, key=key))
                return result
        raise SegmentNotFound(f"{segment_id}: no such segment in {self.store.display}")

    def _parse_ref(self, ref: Any, key: str) -> dict[str, Any]:
        """A segment ref, checked: its id matches its key, its versions are digests."""
        what = f"ref {key} in {self.store.display}"
        mapping(ref, what)
        sid = names.segment_id(ref.get("id"), f"{what}: id")
        site = names.site(ref.get("site"), f"{what}: site", trusted=False)
        if key != f"refs/segments/{site}/{sid}.json":
            raise Malformed(f"{what}: names the segment {sid} at {site}, which does not live there")
        versions = [names.digest(v, f"{what}: version") for v in array_list(ref, "versions", what)]
        if not versions:
            raise Malformed(f"{what}: no versions")
        return {"id": sid, "site": site, "name": string(ref, "name", what), "versions": versions}

    def _record_version(self, sid: str, site: str, name: str, version: str) -> None:
        key = f"refs/segments/{site}/{sid}.json"
        ref = self._ref_at(key, sid, site, name)
        if ref["versions"] and ref["versions"][-1] == version:
            return
        ref["versions"].append(version)
        self.store.put_ref(key, ref)

    def record_versions(self, ref: SegmentRef, versions: Sequence[str], order: Sequence[str]) -> None:
        """Add ``versions`` of a segment to this store's ref (``rayform push``), each placed
        after the versions ``order`` (the source's list, oldest first) puts before it, so a
        pushed old version never becomes the latest."""
        key = f"refs/segments/{ref.site}/{ref.id}.json"
        current = self._ref_at(key, ref.id, ref.site, ref.name)
        have = list(current["versions"])
        rank = {v: i for i, v in enumerate(order)}
        for version in versions:
            if version in have:
                continue
            known = [i for i, v in enumerate(have) if v in rank]
            earlier = [i for i in known if rank[have[i]] < rank[version]]
            # after the last version the source has before it; first if the source has
            # only later ones here; last if this store's versions are all its own
            have.insert(earlier[-1] + 1 if earlier else 0 if known else len(have), version)
        if have != current["versions"]:
            self.store.put_ref(key, {**current, "versions": have})

    def _ref_at(self, key: str, sid: str, site: str, name: str) -> dict[str, Any]:
        try:
            ref: dict[str, Any] = self.store.get_ref(key, parse=lambda r: self._parse_ref(r, key))
            return ref
        except NotFound:
            return {"id": sid, "site": site, "name": name, "versions": []}
