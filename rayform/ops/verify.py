"""Re-hashing everything a slice or a pack references (``ops.references``), to find the one byte that went bad."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from rayform.cache.store_view import CachedStore
from rayform.errors import NotFound, RayformError
from rayform.ops.references import Reference
from rayform.recordings.bundles import open_bundle
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
    stopped: bool = False  # at ``limit`` problems: what follows was not checked

    @property
    def ok(self) -> bool:
        return not self.problems


LIMIT = 100  # problems a verify reports before it stops: a store that bad wants another look first


def verify(store: CachedStore, references: Iterable[Reference], progress: bool = False,
           limit: int = LIMIT) -> Report:
    """Re-hash each blob in full, streamed, and open each bundle to hash its members; report
    every blob missing, corrupt or malformed, and every object that named one but could not
    be read (``Reference.error``). A blob two objects name (a frame chunk of two versions) is
    checked once. The references are walked as they come (a slice of millions is never held
    whole), and the walk stops at ``limit`` problems (``Report.stopped``)."""
    report = Report()
    bad: set[str] = set()
    seen: set[str] = set()
    bar = tqdm(desc="verify", unit="blob", disable=not progress, leave=False)
    for ref in references:
        if ref.error is not None:  # its blob was checked just before: one problem a blob
            if ref.blob not in bad:
                bad.add(ref.blob)
                report.problems.append(Problem(ref.blob, ref.what, ref.error))
        elif ref.blob not in seen:
            seen.add(ref.blob)
            report.blobs += 1
            bar.update()
            error = _check(store, ref, report)
            if error is not None:
                bad.add(ref.blob)
                report.problems.append(Problem(ref.blob, ref.what, error))
        if len(report.problems) >= limit:
            report.stopped = True
            break
    bar.refresh()  # its last count, as the report's
    bar.close()
    return report


def _check(store: CachedStore, ref: Reference, report: Report) -> str | None:
    """What is wrong with one blob (None: nothing): its bytes hash to its name and, a bundle,
    its index and every member are sound."""
    h = hashlib.sha256()
    try:
        with store.open_blob(ref.blob) as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
                report.bytes += len(chunk)
    except NotFound:
        return "is missing"
    if h.hexdigest() != ref.blob:
        return f"is corrupt: its bytes hash to {h.hexdigest()[:16]}"
    if ref.bundle:
        try:
            open_bundle(store, ref.blob).check()
        except RayformError as e:
            return f"is not a sound bundle: {e}"
    return None
