"""Blobs writers share: a dedupe hit freshens what it found, and neither a failed writer's
take-back nor gc deletes a blob freshened since it decided to (local, memory:// and real S3)."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from rayform.store import freshness
from rayform.store.freshness import NewBlob, sweep_tombstones
from rayform.store.store import Store


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path) -> Store:
    if request.param == "local":
        return Store(tmp_path / "store")
    if request.param == "memory":
        return Store(f"memory://rf-{uuid.uuid4().hex}")
    url, options = request.getfixturevalue("s3_store_url")
    return Store(url, options)


def _written(store: Store, data: bytes) -> list[NewBlob]:
    with store.recording_new_blobs() as written:
        store.put_blob(data)
    return list(written)


def test_a_take_back_deletes_what_it_wrote_and_nobody_found(store):
    written = _written(store, b"mine alone")
    assert [b.new for b in written] == [True]
    assert store.take_back(written) == 1
    assert not store.has_blob(written[0].digest)


def test_a_blob_another_writer_found_meanwhile_survives_the_take_back(store):
    written = _written(store, b"shared timestamps")
    time.sleep(0.002)  # memory:// tells times apart to the microsecond
    other = Store(store.url, store.storage_options)  # another writer, in effect another process
    found = _written(other, b"shared timestamps")
    assert [b.new for b in found] == [False]  # a dedupe hit, freshened
    assert store.take_back(written) == 0
    assert other.get_blob(written[0].digest) == b"shared timestamps"


def test_one_writers_own_freshening_does_not_keep_what_it_takes_back(store):
    """An ingest's tasks are one writer: a task that found what a sibling task wrote is no
    reason to keep it when the ingest fails."""
    first = _written(store, b"same array in two episodes")
    time.sleep(0.002)
    second = _written(Store(store.url, store.storage_options), b"same array in two episodes")
    assert store.take_back(first + second) == 1
    assert not store.has_blob(first[0].digest)


def test_gc_keeps_a_blob_freshened_after_its_cutoff(store):
    step = 1.1 if store.protocol == "s3" else 0.01  # S3 says its times to the second
    digest = store.put_blob(b"old garbage")
    time.sleep(step)
    cutoff = time.time()  # the blob was written before it: garbage, by its age
    time.sleep(step)
    Store(store.url, store.storage_options).put_blob(b"old garbage")  # a writer finds it: freshened
    assert not store.collect_blob(digest, cutoff)
    assert store.has_blob(digest)
    assert not store.collect_blob(digest, time.time() - 3600)  # young by any cutoff before it


def test_gc_deletes_an_unfreshened_blob_older_than_its_cutoff(store):
    digest = store.put_blob(b"old garbage")
    assert store.collect_blob(digest, time.time() + 5)
    assert not store.has_blob(digest)
    assert not store.collect_blob(digest, time.time() + 5)  # gone: nothing to do


def test_a_writer_landing_while_a_deleter_holds_the_blob_aside_writes_it_again(tmp_path, monkeypatch):
    """The local deleter's window: the blob renamed to its tombstone. A writer's freshening
    then fails on a missing file, and it writes the blob itself; the deleter's own decision
    (delete its tombstone) loses nothing."""
    store = Store(tmp_path / "store")
    written = _written(store, b"contested")
    path = store.blob_path(written[0].digest)
    real_stat = os.stat
    landed = []

    def stat_then_writer_lands(p, *a, **k):
        if str(p).endswith(os.path.basename(path)) and os.path.basename(str(p)).startswith(".gone-") and not landed:
            landed.append(_written(Store(store.url), b"contested"))
        return real_stat(p, *a, **k)

    monkeypatch.setattr(freshness.os, "stat", stat_then_writer_lands)
    assert store.take_back(written) == 1  # its own copy, moved aside, deleted
    assert [b.new for b in landed[0]] == [True]  # the freshening found nothing: written anew
    assert store.get_blob(written[0].digest) == b"contested"


def test_a_freshening_just_before_the_deleter_moves_the_blob_aside_is_seen(tmp_path, monkeypatch):
    store = Store(tmp_path / "store")
    written = _written(store, b"contested")
    real_rename = os.rename

    def writer_first(src, dst):
        if os.path.basename(str(dst)).startswith(".gone-"):
            _written(Store(store.url), b"contested")
        return real_rename(src, dst)

    monkeypatch.setattr(freshness.os, "rename", writer_first)
    assert store.take_back(written) == 0
    assert store.get_blob(written[0].digest) == b"contested"
    assert not [p for p in (tmp_path / "store").rglob(".gone-*")]


def test_a_tombstone_whose_deleter_died_is_put_back_never_deleted(tmp_path):
    store = Store(tmp_path / "store")
    digest = store.put_blob(b"moved aside by a deleter that was killed")
    path = store.blob_path(digest)
    tomb = os.path.join(os.path.dirname(path), f".gone-{freshness.host_name()}-{2**22 + 12345}-{digest}")
    os.rename(path, tomb)
    assert sweep_tombstones(store.root) == 1
    assert store.get_blob(digest) == b"moved aside by a deleter that was killed"


def test_a_take_back_removes_the_folders_it_empties(tmp_path):
    store = Store(tmp_path / "store")
    kept = store.put_blob(b"kept")
    written = []
    for i in range(20):
        written += _written(store, f"new {i}".encode())
    store.take_back(written)
    folders = sorted(p.name for p in (tmp_path / "store" / "blobs").iterdir())
    assert folders == [kept[:2]]
