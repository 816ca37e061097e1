"""Concurrent writers and gc never lose a referenced blob: real processes racing ingests that
share arrays (LeRobot's timestamp arrays are often the same in every episode), one of them
failing and taking back what it wrote, and gc deleting beside them. The interleavings that
lost blobs before freshening are forced with events; a free-running race checks the rest."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np
import pytest

import rayform
from rayform.errors import InvalidInput
from rayform.ops import gc
from rayform.ops.references import segment_version
from rayform.ops.verify import verify
from rayform.recordings.segments import Segments

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CTX = multiprocessing.get_context("fork")
# the timestamps every episode shares: large enough to be a blob of their own (small ones go in a
# bundle of the writer's, ``store.bundle``), which another writer's episode then finds and shares
T = np.arange(40_000, dtype=np.int64) * 10_000_000


def _episode(i: int, nan: bool = False) -> list:
    values = np.random.default_rng(i).normal(size=(len(T), 4)).astype(np.float32)
    if nan:
        values[7] = np.nan
    return [rayform.ArrayStream("joints", T, values)]


def _complete(client: rayform.Client, refs) -> bool:
    return verify(client.store, [r for ref in refs for r in segment_version(client.store, ref.id, ref.version)]).ok


def _failing_writer(root, wrote, recorded) -> None:
    """Stores two episodes, then fails on a third; holds its take-back until the other writer
    has recorded its own episodes, which found this one's timestamps in the store."""
    client = rayform.Client(root)
    real = Segments.discard

    def discard_later(self, blobs):
        wrote.set()
        recorded.wait(60)
        real(self, blobs)

    Segments.discard = discard_later
    try:
        client.segments.add_many([("lab", f"a{i}", _episode(i, nan=i == 2), None) for i in range(3)])
    except InvalidInput:
        os._exit(0)
    os._exit(1)


def _succeeding_writer(root, wait_for, then, done) -> None:
    client = rayform.Client(root)
    wait_for.wait(60)
    refs = client.segments.store_many([("lab", f"b{i}", _episode(100 + i), None) for i in range(3)])
    then.set()
    done.wait(60)
    client.segments.record(refs)
    os._exit(0)


def test_a_failed_writers_take_back_spares_what_another_writer_found_meanwhile(tmp_path):
    root = tmp_path / "store"
    wrote, recorded, go = CTX.Event(), CTX.Event(), CTX.Event()
    go.set()
    a = CTX.Process(target=_failing_writer, args=(root, wrote, recorded))
    b = CTX.Process(target=_succeeding_writer, args=(root, wrote, recorded, go))
    a.start(), b.start()
    a.join(90), b.join(90)
    assert (a.exitcode, b.exitcode) == (0, 0)
    client = rayform.Client(root)
    refs = client.segments.list("lab")
    assert sorted(r.name for r in refs) == ["b0", "b1", "b2"]  # the failed writer added nothing
    assert _complete(client, refs)  # ... and took nothing the other one references


def _gc_waiting(root, decided, found) -> None:
    """gc, held between its last walk of the refs and its deletes until a writer has found the
    garbage it is about to delete."""
    client = rayform.Client(root)
    real, calls = gc.reachable, []

    def reachable(c):
        out = real(c)
        calls.append(1)
        if len(calls) == 2:
            decided.set()
            found.wait(60)
        return out

    gc.reachable = reachable
    report = gc.collect(client, delete=True, grace_s=3600)
    os._exit(0 if report.deleted else 1)


def test_gc_spares_old_garbage_a_writer_finds_after_gc_last_walked_the_refs(tmp_path):
    root = tmp_path / "store"
    client = rayform.Client(root)
    old = client.store.backend.put_blob(rayform.codec.records.to_npy(T))  # left by an ingest long ago
    path = client.store.backend.blob_path(old)
    os.utime(path, (time.time() - 7200, time.time() - 7200))
    decided, found, gc_done = CTX.Event(), CTX.Event(), CTX.Event()
    g = CTX.Process(target=_gc_waiting, args=(root, decided, found))
    w = CTX.Process(target=_succeeding_writer, args=(root, decided, found, gc_done))
    g.start(), w.start()
    g.join(90)
    gc_done.set()
    w.join(90)
    assert (g.exitcode, w.exitcode) == (0, 0)
    refs = client.segments.list("lab")
    assert len(refs) == 3 and _complete(client, refs)
    assert client.store.backend.has_blob(old)


def _writer_loop(root, index, rounds, start) -> None:
    client = rayform.Client(root)
    start.wait(60)
    for r in range(rounds):
        fail = index == 1 and r % 2 == 0
        try:
            client.segments.add_many([("lab", f"w{index}-r{r}-e{e}", _episode(1000 * index + 10 * r + e,
                                                                              nan=fail and e == 3), None)
                                      for e in range(4)])
        except InvalidInput:
            assert fail
    os._exit(0)


def _gc_loop(root, start, stop) -> None:
    client = rayform.Client(root)
    start.wait(60)
    while not stop.is_set():
        gc.collect(client, delete=True, grace_s=30, force=True)
    os._exit(0)


def test_two_writers_racing_one_failing_with_gc_beside_them_lose_nothing_referenced(tmp_path):
    root = tmp_path / "store"
    client = rayform.Client(root)
    for digest in [client.store.backend.put_blob(rayform.codec.records.to_npy(T))]:  # old garbage the writers share
        os.utime(client.store.backend.blob_path(digest), (time.time() - 7200, time.time() - 7200))
    start, stop = CTX.Event(), CTX.Event()
    writers = [CTX.Process(target=_writer_loop, args=(root, i, 12, start)) for i in range(2)]
    collector = CTX.Process(target=_gc_loop, args=(root, start, stop))
    for p in (*writers, collector):
        p.start()
    start.set()
    for p in writers:
        p.join(240)
    stop.set()
    collector.join(60)
    assert [p.exitcode for p in (*writers, collector)] == [0, 0, 0]
    refs = client.segments.list("lab")
    assert len(refs) == 4 * 12 + 4 * 6  # every round of the first writer, every other of the second
    assert _complete(client, refs)
    assert not [p for p in (root / "blobs").rglob(".gone-*")]


def _adding(root, writer: int, rounds: int) -> None:
    client = rayform.Client(root)
    t = np.arange(5, dtype=np.int64) * 10**8
    for r in range(rounds):  # each append tidies the site: compactions racing the others'
        client.segments.add("lab", f"w{writer}-{r}", [rayform.ArrayStream("j", t, np.full((5, 1), r, np.float32))])
    os._exit(0)


def test_concurrent_ingests_and_their_compactions_keep_one_row_per_version(tmp_path):
    """4 writers appending to one site at once, each append's tidy compacting the newest parts
    while the others do: no version lost, and once compacted, one row for each."""
    root = tmp_path / "store"
    rayform.Client(root).segments.add("lab", "first", _episode(0))
    writers = [CTX.Process(target=_adding, args=(root, w, 12)) for w in range(4)]
    for p in writers:
        p.start()
    for p in writers:
        p.join(240)
    assert [p.exitcode for p in writers] == [0] * 4
    client = rayform.Client(root)
    listed = client.segments.catalog.table(site="lab")
    versions = set(zip(listed.column("id").to_pylist(), listed.column("version").to_pylist()))
    assert len(versions) == 1 + 4 * 12
    client.segments.compact("lab")
    after = client.segments.catalog.table(site="lab")
    assert after.num_rows == len(versions)
    assert set(zip(after.column("id").to_pylist(), after.column("version").to_pylist())) == versions


def _gc_forced(url, options, grace, start, stop) -> None:
    client = rayform.Client(url, storage_options=options)
    start.wait(60)
    while not stop.is_set():
        try:
            gc.collect(client, delete=True, grace_s=grace, force=True)
        except rayform.errors.RayformError:
            pass  # a catalog part replaced under its walk: the next round sees the new one
    os._exit(0)


def _race_gc(url: str, options: dict, races: int, grace: float) -> None:
    """``gc --grace G --force`` looping beside ``races`` writes: each write either records its
    versions whole or fails naming the fix, recording nothing; never a version whose blob is gone."""
    client = rayform.Client(url, storage_options=options)
    # spawned, not forked: a forked copy of this process's S3 client shares its connections
    # (and read another process's answers: a listing from before the writes)
    ctx = multiprocessing.get_context("spawn")
    start, stop = ctx.Event(), ctx.Event()
    g = ctx.Process(target=_gc_forced, args=(url, options, grace, start, stop))
    g.start()
    start.set()
    recorded, refused = [], 0
    try:
        for r in range(races):
            t = np.arange(40_000, dtype=np.int64) * 10_000_000 + r  # a loose blob of its own each race
            try:
                recorded += client.segments.add_many([("lab", f"r{r}", [rayform.ArrayStream("j", t, np.full(
                    (len(t), 1), r, np.float32))], None)])
            except rayform.errors.StoreError as e:
                assert "deleted before its commit" in str(e)
                refused += 1
    finally:
        stop.set()
        g.join(120)
    lost = [ref for ref in recorded if not _complete(client, [ref])]
    assert not lost, f"{len(lost)} of {len(recorded)} recorded versions lost a blob ({refused} writes refused)"
    listed = {ref.version for ref in client.segments.list("lab")}
    assert listed == {ref.version for ref in recorded}


def test_gc_with_no_grace_beside_writes_loses_nothing_local(tmp_path):
    """Local stores are race-free: the commit's confirmation freshens each blob, and gc's
    tombstone rename sees a freshening that lands before it."""
    _race_gc(str(tmp_path / "store"), {}, 100, 0.0)


@pytest.mark.s3
def test_gc_with_a_short_grace_beside_writes_loses_nothing_s3(s3_store_url):
    """S3 tells times in whole seconds: a blob written or freshened 1.5 s ago may say 2.4 s.
    A grace under the floor (2 s), forced, beside 100 writes: nothing recorded is lost. (Before
    the store stopped keeping s3fs's listings, the looping gc read every part written after its
    first walk as "not found" and deleted the older segments' bundles; with no grace at all,
    one request's window stays on S3 between gc's last look and its delete: the README says so.)"""
    url, options = s3_store_url
    _race_gc(url, options, 100, 2.0)
