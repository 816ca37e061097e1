"""A large slice's segments as one columnar blob, and the sequence a slice reads them as.

A slice of a few thousand segments keeps them in its JSON manifest (``rayform.slice/1``, one
object each). A slice of a million would be a 150 MB JSON document that every process
parses into a million objects; from ``TABLE_AT`` segments on, a slice manifest
(``rayform.slice/2``) names a table blob instead: msgpack of a few byte strings, one per
column (a segment id's 6 bytes, a version's 32, its site's and bundle's place in short lists,
the time range where one is taken), read into numpy arrays as they are. ``SliceSegments``
is the slice's ``segments`` either way: a sequence that makes each ``SliceSegment`` when it
is asked for, never all of them at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import msgpack
import numpy as np

from rayform import names
from rayform.errors import Malformed
from rayform.recordings.catalog import hex_bytes


@dataclass(frozen=True, slots=True)  # slots: a slice may hold tens of thousands
class SliceSegment:
    """One segment version in a slice, with the time range taken from it (None: all), and the
    bundle holding its manifest (None: a loose blob), so a slice reads, packs, pushes and keeps
    its segments without a catalog."""

    id: str
    version: str
    site: str
    start_ns: int | None = None
    end_ns: int | None = None
    bundle: str | None = None

    def to_manifest(self) -> dict[str, Any]:
        out = {"id": self.id, "version": self.version, "site": self.site, "start_ns": self.start_ns,
               "end_ns": self.end_ns}
        return out if self.bundle is None else {**out, "bundle": self.bundle}


TABLE_AT = 10_000  # a slice this large keeps its segments in a table blob
TABLE_FORMAT = "rayform.slice-table/1"
UNTAKEN = np.iinfo(np.int64).min  # start_ns / end_ns not taken


@dataclass
class Columns:
    """Segments of a slice as columns: what ``slices.create`` makes of a selection of a million
    without a million objects (``SliceSegment`` where it is made of a few)."""

    ids: np.ndarray  # "V6": a segment id's 12 hex as bytes
    versions: np.ndarray  # "V32"
    site: np.ndarray  # int32, into ``sites``
    sites: list[str]
    bundle: np.ndarray  # int32, into ``bundles``; -1: none
    bundles: list[str]
    start_ns: np.ndarray  # int64; ``UNTAKEN``: not taken
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of(cls, segments: Sequence[SliceSegment]) -> Columns:
        sites = sorted({s.site for s in segments})
        bundles = sorted({s.bundle for s in segments if s.bundle is not None})
        site_at = {s: i for i, s in enumerate(sites)}
        bundle_at = {b: i for i, b in enumerate(bundles)}
        return cls(
            hex_bytes([s.id[4:] for s in segments], 6), hex_bytes([s.version for s in segments], 32),
            np.array([site_at[s.site] for s in segments], np.int32), sites,
            np.array([bundle_at[s.bundle] if s.bundle is not None else -1 for s in segments], np.int32), bundles,
            np.array([UNTAKEN if s.start_ns is None else s.start_ns for s in segments], np.int64),
            np.array([UNTAKEN if s.end_ns is None else s.end_ns for s in segments], np.int64))

    @classmethod
    def concat(cls, parts: Sequence[Columns]) -> Columns:
        sites = sorted({s for p in parts for s in p.sites})
        bundles = sorted({b for p in parts for b in p.bundles})
        site_at = {s: i for i, s in enumerate(sites)}
        bundle_at = {b: i for i, b in enumerate(bundles)}

        def recode(codes: np.ndarray, names: list[str], at: dict[str, int]) -> np.ndarray:
            table = np.array([at[n] for n in names] + [-1], np.int32)  # -1 stays -1
            return np.asarray(table[codes], np.int32)

        return cls(np.concatenate([p.ids for p in parts]), np.concatenate([p.versions for p in parts]),
                   np.concatenate([recode(p.site, p.sites, site_at) for p in parts]), sites,
                   np.concatenate([recode(p.bundle, p.bundles, bundle_at) for p in parts]), bundles,
                   np.concatenate([p.start_ns for p in parts]), np.concatenate([p.end_ns for p in parts]))

    def segments(self) -> list[SliceSegment]:
        """As ``SliceSegment`` objects (for a selection small enough to list)."""
        return list(SliceSegments(table=self.encode()))

    def duplicate(self) -> int | None:
        """The place of a segment version (and time range) selected a second time, or None."""
        rows = np.empty(len(self), [("id", "V6"), ("version", "V32"), ("start", "<i8"), ("end", "<i8")])
        rows["id"], rows["version"], rows["start"], rows["end"] = self.ids, self.versions, self.start_ns, self.end_ns
        order = np.argsort(rows.view(f"V{rows.dtype.itemsize}").ravel(), kind="stable")
        same = np.flatnonzero(rows[order][1:] == rows[order][:-1])
        return int(order[same[0] + 1]) if len(same) else None

    def encode(self) -> bytes:
        """The table blob (deterministic: the same segments, the same bytes): sites and bundles
        are listed sorted, whatever order they came in."""
        sites, bundles = sorted(self.sites), sorted(self.bundles)
        site = np.array([sites.index(s) for s in self.sites] + [-1], np.int32)[self.site]
        bundle = np.array([bundles.index(b) for b in self.bundles] + [-1], np.int32)[self.bundle]
        columns = {
            "format": TABLE_FORMAT,
            "count": len(self),
            "sites": sites,
            "bundles": b"".join(bytes.fromhex(b) for b in bundles),
            "id": self.ids.tobytes(),
            "version": self.versions.tobytes(),
            "site": site.astype("<u4").tobytes(),
            "bundle": bundle.astype("<i4").tobytes(),
            "start_ns": self.start_ns.astype("<i8").tobytes(),
            "end_ns": self.end_ns.astype("<i8").tobytes(),
        }
        return bytes(msgpack.packb(columns, use_bin_type=True))


def encode(segments: Sequence[SliceSegment]) -> bytes:
    """The table blob of ``segments`` (deterministic: the same segments, the same bytes)."""
    return Columns.of(segments).encode()


class SliceSegments(Sequence[SliceSegment]):
    """A slice's segments: a list (``rayform.slice/1``) or columns (``rayform.slice/2``)."""

    def __init__(self, listed: Sequence[SliceSegment] | None = None, table: bytes | None = None, what: str = "slice"):
        self._listed = tuple(listed) if listed is not None else None
        if table is not None:
            self._columns(table, what)

    def _columns(self, data: bytes, what: str) -> None:
        try:
            doc = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=1 << 34, max_str_len=1 << 20,
                                  max_array_len=1 << 24, max_map_len=64)
        except Exception as e:  # untrusted bytes: whatever msgpack raises
            raise Malformed(f"{what}: its segments table is not one ({type(e).__name__})") from None
        if not isinstance(doc, dict) or doc.get("format") != TABLE_FORMAT:
            raise Malformed(f"{what}: its segments table is not a {TABLE_FORMAT}")
        n = doc.get("count")
        if not isinstance(n, int) or isinstance(n, bool) or not 0 < n < 1 << 40:
            raise Malformed(f"{what}: its segments table says {str(n)[:20]} segments")
        sizes = {"id": 6, "version": 32, "site": 4, "bundle": 4, "start_ns": 8, "end_ns": 8}
        for column, size in sizes.items():
            if not isinstance(doc.get(column), bytes) or len(doc[column]) != n * size:
                raise Malformed(f"{what}: its segments table's column {column} is not {n} values")
        sites = doc.get("sites")
        if not isinstance(sites, list) or not all(isinstance(s, str) and names.SITE.fullmatch(s) for s in sites):
            raise Malformed(f"{what}: its segments table's sites are not site names")
        bundles = doc.get("bundles")
        if not isinstance(bundles, bytes) or len(bundles) % 32:
            raise Malformed(f"{what}: its segments table's bundles are not digests")
        self._n = n
        self._ids = np.frombuffer(doc["id"], "V6")
        self._versions = np.frombuffer(doc["version"], "V32")
        self._site = np.frombuffer(doc["site"], "<u4")
        self._bundle = np.frombuffer(doc["bundle"], "<i4")
        self._start = np.frombuffer(doc["start_ns"], "<i8")
        self._end = np.frombuffer(doc["end_ns"], "<i8")
        self._sites: list[str] = sites
        self._bundles = [bundles[i:i + 32].hex() for i in range(0, len(bundles), 32)]
        if n and (self._site.max() >= len(sites) or self._bundle.max() >= len(self._bundles) or self._bundle.min() < -1):
            raise Malformed(f"{what}: its segments table names a site or bundle it does not list")

    def __len__(self) -> int:
        return len(self._listed) if self._listed is not None else self._n

    @overload
    def __getitem__(self, index: int) -> SliceSegment: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[SliceSegment]: ...

    def __getitem__(self, index: int | slice) -> SliceSegment | Sequence[SliceSegment]:
        if self._listed is not None:
            return self._listed[index]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = range(self._n)[index]
        start, end, bundle = int(self._start[i]), int(self._end[i]), int(self._bundle[i])
        return SliceSegment("seg_" + bytes(self._ids[i]).hex(), bytes(self._versions[i]).hex(),
                            self._sites[int(self._site[i])], None if start == UNTAKEN else start,
                            None if end == UNTAKEN else end, None if bundle < 0 else self._bundles[bundle])

    def __iter__(self) -> Iterator[SliceSegment]:
        return iter(self._listed) if self._listed is not None else (self[i] for i in range(self._n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(other) != len(self):
            return NotImplemented if not isinstance(other, Sequence) else False
        return all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(len(self))

    @property
    def sites(self) -> list[str]:
        if self._listed is not None:
            return sorted({s.site for s in self._listed})
        return sorted({self._sites[i] for i in np.unique(self._site).tolist()})

    def first_positions(self) -> dict[str, int]:
        """Each segment id's first place in the slice (its episode index)."""
        if self._listed is not None:
            out: dict[str, int] = {}
            for i, s in enumerate(self._listed):
                out.setdefault(s.id, i)
            return out
        ids, first = np.unique(self._ids, return_index=True)
        return {"seg_" + bytes(x).hex(): int(i) for x, i in zip(ids, first)}

    def versions(self) -> np.ndarray:
        """Every segment's version as its 32 bytes (``V32``), in the slice's order."""
        if self._listed is not None:
            return hex_bytes([s.version for s in self._listed], 32)
        return self._versions

    def arrays(self) -> dict[str, Any]:
        """The columns themselves (a table's), for code that works on a whole slice at once."""
        if self._listed is not None:
            raise ValueError("a listed slice has no columns")
        return {"id": self._ids, "version": self._versions, "site": self._site, "bundle": self._bundle}
