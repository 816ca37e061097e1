"""Re-hashing everything a slice or a pack references (``ops.references``), to find the one byte that went bad."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from rayform.cache.store_view import CachedStore
from rayform.errors import NotFound
from rayform.ops.references import Reference, unique
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


def verify(store: CachedStore, references: Iterable[Reference], progress: bool = False) -> Report:
    """Re-hash each blob in full, streamed; collect every mismatch or absence. A blob two
    objects name (a frame chunk of two versions) is hashed once."""
    report = Report()
    blobs = unique(references)
    for blob, what in tqdm(blobs.items(), total=len(blobs), desc="verify", unit="blob", disable=not progress,
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
