"""``rayform gc``: delete the blobs of a store that no ref reaches.

A blob is reachable when a ref names it, directly or through the manifests it names, as
``ops.references`` walks them (the one answer: push, pull and verify use it too). Everything else is garbage once it is older than
the grace period (an hour by default): an ingest or a pack running now writes its blobs
before the ref that reaches them, so a young unreachable blob is work in progress, never
garbage. A blob whose age the store does not report is kept.

What a manifest reaches can only be known by reading it, so a ref or manifest that cannot
be read or is not rayform's stops the collection with an error naming it: gc never deletes
on a guess. The refs are walked twice, before listing the blobs and again right before
deleting, so a ref written meanwhile (a slice over segments that were unreachable) saves
what it names; and a writer that finds a blob it needs (a dedupe hit) freshens it, which
keeps it from this gc whatever the walks saw (``store.freshness``: race-free on a local
store; on S3 but for the one request between gc's last look and its delete).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rayform.client import Client
from rayform.errors import InvalidInput, RayformError, StoreError
from rayform.ops.references import store_closure
from rayform.store.listing import StoredBlob

GRACE_S = 3600.0
GRACE_FLOOR_S = 600.0  # a shorter grace deletes only with force: it would take a running writer's blobs
CLOCK_SLACK_S = 1.0  # a store's times may be whole seconds (S3's LastModified): a blob is as young as it may be


@dataclass
class GcReport:
    reachable: int = 0  # blobs some ref reaches
    young: int = 0  # unreachable, but written within the grace period (or of unknown age)
    garbage: list[StoredBlob] = field(default_factory=list)  # deleted, or to delete on a dry run
    deleted: bool = False

    @property
    def garbage_bytes(self) -> int:
        return sum(b.size for b in self.garbage)


def reachable(client: Client) -> set[str]:
    """Every blob some ref of the store reaches (``ops.references.store_closure``)."""
    try:
        return {r.blob for r in store_closure(client.store)}
    except RayformError as e:
        raise StoreError(f"gc: cannot tell what the store reaches ({e}). Nothing was deleted; "
                         "repair or remove that ref first (rayform verify names bad blobs)") from None


def collect(client: Client, *, delete: bool = False, grace_s: float = GRACE_S, now: float | None = None,
            force: bool = False) -> GcReport:
    """Find (and with ``delete``, delete) the blobs no ref reaches that are older than ``grace_s``.
    A grace under ``GRACE_FLOOR_S`` deletes only with ``force``: an ingest or a pack running
    meanwhile has written blobs that no ref reaches yet, and would lose them. Ages allow for a
    store that tells times in whole seconds."""
    if grace_s < 0:
        raise StoreError(f"gc: a grace period of {grace_s:g} s; give 0 or more")
    if delete and grace_s < GRACE_FLOOR_S and not force:
        raise InvalidInput(f"gc: a grace of {grace_s:g} s would delete the blobs of an ingest or a pack running now "
                           f"(written before the ref that reaches them); give {GRACE_FLOOR_S / 60:g} min or more, "
                           "or --force when nothing writes to this store")
    report = GcReport()
    keep = reachable(client)
    now = time.time() if now is None else now
    for blob in client.store.list_blobs():
        if blob.digest in keep:
            report.reachable += 1
        elif blob.modified is None or now - blob.modified < grace_s + CLOCK_SLACK_S:
            report.young += 1
        else:
            report.garbage.append(blob)
    if delete and report.garbage:
        again = reachable(client)  # a ref written since the first walk saves what it names
        saved = [b for b in report.garbage if b.digest in again]
        report.reachable += len(saved)
        report.garbage = [b for b in report.garbage if b.digest not in again]
        # each deleted unless freshened since the cut-off: a writer that found it meanwhile keeps it
        cutoff = now - grace_s - CLOCK_SLACK_S
        deleted = [b for b in report.garbage if client.store.collect_blob(b.digest, cutoff)]
        report.young += len(report.garbage) - len(deleted)
        report.garbage = deleted
        client.store.sweep_temporaries()
        client.store.remove_empty_folders()
    report.deleted = delete
    return report
