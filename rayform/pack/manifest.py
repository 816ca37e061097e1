"""A stored pack: its manifest, and the per-sample offset index it names.

A pack manifest comes from the store, so it is untrusted: every name in it is checked
against its grammar, every count and size bounded and cross-checked, before it is used.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform import names
from rayform.errors import InvalidInput, Malformed
from rayform.pack import layout
from rayform.pack.layout import StreamSchema
from rayform.pack.spec import PACK_FORMAT, READABLE_FORMATS, PackSpec
from rayform.pack.stats import StreamStats, stats_of
from rayform.untrusted import array_list, integer, json_objects, mapping, parsing

SEGMENTS_APART = 10_000  # a pack of a slice this large keeps its per-segment entries in a blob of their own
MAX_SHARD_BYTES = 1 << 40
MAX_SAMPLES = 1 << 40
CHUNK_BYTES = (1 << 12, 1 << 26)  # the smallest and largest chunk size a manifest may give


@dataclass(frozen=True)
class ShardInfo:
    sha256: str
    bytes: int
    samples: int


@dataclass(frozen=True)
class SegmentCount:
    """What a pack manifest says of one segment of the slice."""

    id: str
    version: str
    site: str
    samples: int
    instants: int
    dropped: Mapping[str, int]


def segment_entries(segments: Sequence[SegmentCount]) -> list[dict[str, Any]]:
    """What a pack says of each segment of its slice (in its manifest, or for a slice of
    ``SEGMENTS_APART`` or more, in a blob of its own: ``PackBlobs.segments_blob``)."""
    return [{"id": s.id, "version": s.version, "site": s.site, "samples": s.samples, "instants": s.instants,
             "dropped": dict(s.dropped)} for s in segments]


@dataclass(frozen=True)
class PackBlobs:
    """What a pack stored besides its manifest: its shards in order, the offset index blob, the
    blob of chunk digests (every ``chunk_bytes`` of every shard), and for a large slice's pack
    the blob of ``segment_entries``."""

    shards: Sequence[ShardInfo]
    index: str
    chunk_bytes: int
    chunks: str
    segments_blob: str | None = None


def write_manifest(*, slice_id: str, slice_digest: str, spec: PackSpec, schema: Mapping[str, StreamSchema],
                   members: Sequence[str], stored: PackBlobs, stats: Mapping[str, StreamStats],
                   segments: Sequence[SegmentCount]) -> dict[str, Any]:
    """The manifest of a pack, as the packer stores it and ``Pack`` reads it back (one form, here):
    it names what the pack ``stored``; a large slice's segment entries are in a blob of their
    own, which every process opening the pack would otherwise parse."""
    by_stream: dict[str, int] = {}
    for s in segments:
        for name, n in s.dropped.items():
            by_stream[name] = by_stream.get(name, 0) + int(n)
    return {
        "format": PACK_FORMAT,
        "slice": slice_id,
        "slice_digest": slice_digest,
        "spec": spec.to_manifest(),
        "schema": {n: s.to_manifest() for n, s in schema.items()},
        "members": list(members),
        **shard_fields(stored),
        "samples": sum(s.samples for s in segments),
        "stats": {k: v.to_manifest() for k, v in stats.items()},
        "instants": sum(s.instants for s in segments),
        "dropped": {"instants": sum(s.instants - s.samples for s in segments), "by_stream": by_stream},
        "segments": segment_entries(segments) if stored.segments_blob is None else {"blob": stored.segments_blob,
                                                                                      "count": len(segments)},
    }


def shard_fields(stored: PackBlobs) -> dict[str, Any]:
    """What a manifest says of its stored shards: the list in order, the offset index blob and
    the blob of chunk digests."""
    return {"shards": [{"sha256": s.sha256, "bytes": s.bytes, "samples": s.samples} for s in stored.shards],
            "index": stored.index, "chunks": {"bytes": stored.chunk_bytes, "digests": stored.chunks}}


def pack_ref(digest: str, spec: PackSpec, made: str) -> dict[str, Any]:
    """The ref that names a pack's manifest (``refs/packs/<slice>/<key>.json``): its spec and
    when it was made (ISO 8601 UTC), which orders the packs that serve the same ask."""
    return {"manifest": digest, "spec": spec.to_manifest(), "created": made}


class Pack:
    """A slice rendered at one :class:`PackSpec`: shards, schema, counts.

    ``index_blob`` names the per-sample offset index (its layout: ``rayform.pack.layout``).

    ``chunk_blob`` (packs made since chunk hashes exist) names the sha256 of every
    ``chunk_bytes`` of every shard, 32 raw bytes each, shard after shard: a shard arriving
    from the store is verified chunk by chunk, before any of its bytes is used.
    """

    def __init__(self, digest: str, manifest: Mapping[str, Any]):
        what = f"pack manifest {digest[:16]}"
        mapping(manifest, what)
        if manifest.get("format") not in READABLE_FORMATS:
            raise Malformed(f"{what}: format {str(manifest.get('format'))[:40]!r}, not {PACK_FORMAT}")
        self.digest = digest
        # per segment entries are kept as compressed JSON, parsed when asked for: as dicts
        # they take ~1 KB a segment in every process that holds the pack (and a DataLoader
        # worker's RSS counts its parent's heap): 33 MB for a slice of 33,000 episodes, 1 here
        self._manifest = {k: v for k, v in manifest.items() if k != "segments"}
        self.segments_blob: str | None = None  # a large slice's per-segment entries, apart
        listed = manifest.get("segments")
        if isinstance(listed, Mapping):
            self.segments_blob = names.digest(listed.get("blob"), f"{what}: segments")
            self._apart = integer(listed, "count", what, 1, MAX_SAMPLES)
            self._segments = b""
        else:
            self._segments = zlib.compress(json.dumps(list(array_list(manifest, "segments", what)),
                                                      separators=(",", ":")).encode(), 1)
        self.slice_id: str = names.slice_id(manifest.get("slice"), f"{what}: slice")
        with parsing(what):
            self.spec = PackSpec.from_manifest(dict(mapping(manifest.get("spec"), f"{what}: spec")))
            self.schema: dict[str, StreamSchema] = {
                n: StreamSchema.from_manifest(n, s, what) for n, s in mapping(manifest.get("schema"), what).items()
            }
        # per array stream (and <stream>:delta); None for a pack made before they were kept
        self.stats: dict[str, StreamStats] | None = stats_of(manifest, what, self.schema)
        self.members: list[str] = list(array_list(manifest, "members", what))
        expected = layout.members_of(self.schema, self.spec.max_history)
        if self.members != expected:
            raise Malformed(f"{what}: members {str(self.members)[:120]} do not match its schema")
        self.shards: tuple[ShardInfo, ...] = tuple(
            ShardInfo(names.digest(mapping(s, what).get("sha256"), f"{what}: shard {i}"),
                      integer(s, "bytes", f"{what}, shard {i}", 1, MAX_SHARD_BYTES),
                      integer(s, "samples", f"{what}, shard {i}", 1, MAX_SAMPLES))
            for i, s in enumerate(array_list(manifest, "shards", what))
        )
        self.index_blob: str = names.digest(manifest.get("index"), f"{what}: index")
        self.samples: int = integer(manifest, "samples", what, 1, MAX_SAMPLES)
        if sum(s.samples for s in self.shards) != self.samples:
            raise Malformed(f"{what}: its shards hold {sum(s.samples for s in self.shards)} samples, "
                            f"it claims {self.samples}")
        self.instants: int = integer(manifest, "instants", what, 0, MAX_SAMPLES)
        self.dropped: dict[str, Any] = dict(mapping(manifest.get("dropped"), what))
        self.chunk_bytes, self.chunk_blob = self._chunks(manifest.get("chunks"), what)
        self.shard_bytes = np.array([s.bytes for s in self.shards], np.int64)
        # chunk digests of shard i are entries chunk_starts[i] .. chunk_starts[i + 1]
        per_shard = -(-self.shard_bytes // self.chunk_bytes) if self.chunk_bytes else np.zeros_like(self.shard_bytes)
        self.chunk_starts = np.concatenate([[0], np.cumsum(per_shard)])

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as stored."""
        if self.segments_blob is not None:
            return {**self._manifest, "segments": {"blob": self.segments_blob, "count": self._apart}}
        return {**self._manifest, "segments": self.segments}

    @property
    def segments(self) -> list[dict[str, Any]]:
        """Per segment of the slice: id, version, site, samples, instants, dropped (of a pack
        whose entries are apart, a blob of their own: ``segments_of``)."""
        if self.segments_blob is not None:
            raise InvalidInput(f"pack {self.key}: its {self._apart} segments' entries are a blob of their own. "
                               "Read them with pack.segments_of(store)")
        result: list[dict[str, Any]] = json.loads(zlib.decompress(self._segments))
        return result

    def segments_of(self, store: Any) -> list[dict[str, Any]]:
        """``segments``, wherever they are (``store``: the pack's, for a blob of them)."""
        if self.segments_blob is None:
            return self.segments
        entries = json_objects(store.get_blob(self.segments_blob), f"segments of pack {self.key}")
        if len(entries) != self._apart:
            raise Malformed(f"pack {self.key}: {len(entries)} segments' entries, its manifest says {self._apart}")
        return entries

    @staticmethod
    def _chunks(doc: Any, what: str) -> tuple[int, str | None]:
        if doc is None:
            return 0, None
        mapping(doc, what)
        size = integer(doc, "bytes", f"{what}: chunks", *CHUNK_BYTES)
        return size, names.digest(doc.get("digests"), f"{what}: chunk digests")

    def __repr__(self) -> str:
        return (f"Pack({self.slice_id}, {self.spec.key()}, shards={len(self.shards)}, "
                f"samples={self.samples})")

    @property
    def fps(self) -> float:
        return self.spec.fps

    @property
    def key(self) -> str:
        return self.spec.key()

    @property
    def index_columns(self) -> int:
        return layout.index_columns(self.members)

    @property
    def index_lead(self) -> int:
        return layout.index_lead(self.members)

    @property
    def has_video(self) -> bool:
        """Whether a camera of this pack is video (clips, ``pack.layout``)."""
        return any(s.video is not None for s in self.schema.values())

    def member_column(self, member: str) -> int:
        """Column of ``member``'s data offset in the index (its size is the next one)."""
        return layout.member_column(self.members, member)

    def chunks_of(self, shard: int) -> range:
        """Which entries of the chunk digests belong to ``shard`` (needs ``chunk_bytes``)."""
        return range(int(self.chunk_starts[shard]), int(self.chunk_starts[shard + 1]))

    @property
    def chunk_count(self) -> int:
        return int(self.chunk_starts[-1])
