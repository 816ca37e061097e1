"""Re-hashing everything a slice or a pack names, to find the one byte that went bad."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from rayform.cache.store_view import CachedStore
from rayform.errors import NotFound, RayformError
from rayform.pack import Pack
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice
from rayform.store.content import CHUNK


@dataclass(frozen=True)
class Problem:
    blob: str
    what: str  # where the blob belongs, e.g. "pack fps15-1a2b3c4d shard 3"
    error: str

    def __str__(self) -> str:
        return f"{self.what}: blob {self.blob[:16]} {self.error}"


@dataclass
class Report:
    blobs: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def slice_blobs(slice_: Slice, strict: bool = False) -> Iterator[tuple[str, str]]:
    """``(blob, what)`` for the slice manifest, each segment manifest and all segment data.

    A segment manifest that is missing reaches nothing more; one that cannot be read is
    skipped (verify reports it), or with ``strict`` raised (gc must know what it reaches)."""
    yield slice_.digest, f"{slice_.id} manifest"
    segments = Segments(slice_.store)
    for s in slice_.segments:
        yield s.version, f"segment {s.id} manifest"
        try:
            seg = segments.get(s.id, s.version)
        except NotFound:
            continue
        except RayformError:
            if strict:
                raise
            continue  # the manifest itself is reported bad
        for name, info in seg.streams.items():
            yield info.timestamps, f"segment {s.id} stream {name} timestamps"
            for i, (blob, _) in enumerate(info.data):
                yield blob, f"segment {s.id} stream {name} data {i}"
            if info.sizes:
                yield info.sizes, f"segment {s.id} stream {name} frame sizes"


def pack_blobs(pack: Pack) -> Iterator[tuple[str, str]]:
    yield pack.digest, f"pack {pack.key} manifest"
    for i, shard in enumerate(pack.shards):
        yield shard.sha256, f"pack {pack.key} shard {i}"
    yield pack.index_blob, f"pack {pack.key} index"
    if pack.chunk_blob is not None:
        yield pack.chunk_blob, f"pack {pack.key} chunk digests"


def verify(store: CachedStore, blobs: Iterable[tuple[str, str]], progress: bool = False) -> Report:
    """Re-hash each blob in full, streamed; collect every mismatch or absence."""
    report = Report()
    unique: dict[str, str] = {}
    for blob, what in blobs:  # a blob two things name (a frame chunk of two versions) is hashed once
        unique.setdefault(blob, what)
    for blob, what in tqdm(unique.items(), total=len(unique), desc="verify", unit="blob", disable=not progress,
                           leave=False):
        report.blobs += 1
        h = hashlib.sha256()
        try:
            with store.open_blob(blob) as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    report.bytes += len(chunk)
        except NotFound:
            report.problems.append(Problem(blob, what, "is missing"))
            continue
        if h.hexdigest() != blob:
            report.problems.append(Problem(blob, what, f"is corrupt: its bytes hash to {h.hexdigest()[:16]}"))
    return report
