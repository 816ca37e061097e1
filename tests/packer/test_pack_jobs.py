"""Packing's jobs: shards written where they are rendered, nothing of a sample back to the driver,
runs checked and cleared, shard sizes near the target."""

from __future__ import annotations

import os
import pickle
from concurrent.futures import Executor, Future, ProcessPoolExecutor

import numpy as np
import pytest

from rayform.errors import IntegrityError
from rayform.ops.gc import collect
from rayform.pack.layout import LOWDIM
from rayform.packer import scratch as scratch_module
from rayform.packer.assemble import write_shard
from rayform.read.reader import PackReader

SPEC = dict(shard_bytes=200_000, samples_per_task=16)


class Recording(Executor):
    """A process pool that keeps every job and result as they cross a process boundary."""

    def __init__(self, workers: int = 2, before=None):
        self.pool = ProcessPoolExecutor(workers)
        self.sent: list[bytes] = []
        self.returned: list[bytes] = []
        self.before = before  # called with each job before it is submitted

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self.before is not None:
            self.before(fn, *args)
        self.sent.append(pickle.dumps((fn, args, kwargs)))
        future = self.pool.submit(fn, *args, **kwargs)
        future.add_done_callback(lambda f: f.exception() or self.returned.append(pickle.dumps(f.result())))
        return future

    def shutdown(self, wait=True, *, cancel_futures=False):
        self.pool.shutdown(wait, cancel_futures=cancel_futures)


def _pieces_of_samples(client, pack, n=40):
    """Distinctive stretches of the pack's members: 48 bytes from the middle of each image, the
    first 32 of each record (its timestamp among them). The statistics' sample of array values
    does cross: it is what the percentiles are computed from."""
    reader = PackReader(client.store, pack, pack.members)
    out = []
    for _, raw in reader.raw_many(range(0, pack.samples, max(1, pack.samples // n))):
        for member, data in raw.items():
            data = bytes(data)
            out.append(data[:32] if member == LOWDIM else data[len(data) // 2: len(data) // 2 + 48])
    return out


def test_no_sample_byte_passes_through_the_executor(demo_client):
    client, s = demo_client
    with Recording() as ex:
        pack = client.pack(s, 15, executor=ex, progress=False, **SPEC)
    inline = client.pack(s, 15, workers=1, progress=False, force=True, **SPEC)
    assert [x.sha256 for x in pack.shards] == [x.sha256 for x in inline.shards] and len(pack.shards) >= 3
    crossing = ex.sent + ex.returned
    assert len(ex.returned) == len(ex.sent) > len(pack.shards)  # runs, then one job per shard
    pieces = _pieces_of_samples(client, pack)
    assert pieces and not [p for p in pieces if any(p in blob for blob in crossing)]
    # and that check would catch a sample: every piece is in the shards themselves
    shards = [open(client.store.backend.blob_path(x.sha256), "rb").read() for x in pack.shards]
    assert all(any(p in sh for sh in shards) for p in pieces)


def test_the_runs_a_pack_leaves_in_its_store_are_removed(demo_client):
    client, s = demo_client
    with Recording() as ex:  # a foreign executor: runs go through the store
        pack = client.pack(s, 15, executor=ex, progress=False, **SPEC)
    report = collect(client, grace_s=0, delete=False)
    assert report.garbage == [] and report.young == 0, "the pack left blobs no ref reaches"
    assert pack.samples == sum(x.samples for x in pack.shards)


def test_a_run_changed_in_the_store_is_refused_before_it_is_read(demo_client):
    client, s = demo_client
    flipped = []

    def corrupt(fn, job):
        if fn is write_shard and not flipped:  # every run is written: damage one section
            section = job.sections[len(job.sections) // 2]
            path = client.store.backend.blob_path(section.run)
            data = bytearray(open(path, "rb").read())
            data[section.offset + section.size // 2] ^= 0x20
            os.chmod(path, 0o644)
            open(path, "wb").write(bytes(data))
            flipped.append(section.run)

    with Recording(before=corrupt) as ex, pytest.raises(IntegrityError, match="pack run .* not the bytes written"):
        client.pack(s, 15, executor=ex, progress=False, **SPEC)
    assert flipped
    assert not list(client.store.list_refs("refs/packs")), "a pack ref was written"
    assert not client.store.backend.has_blob(flipped[0]), "the runs were left in the store"


def test_local_pool_runs_leave_no_scratch(demo_client, monkeypatch, tmp_path):
    client, s = demo_client
    monkeypatch.setattr(scratch_module, "SCRATCH", str(tmp_path / "scratch"))
    client.pack(s, 15, workers=2, progress=False, **SPEC)
    assert not os.listdir(tmp_path / "scratch")


@pytest.mark.parametrize("shard_bytes", [70_000, 200_000, 1_000_000])
def test_shards_are_about_the_size_asked_for(demo_client, shard_bytes):
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=shard_bytes)
    sizes = np.array([x.bytes for x in pack.shards])
    whole = sizes[:-1] if len(sizes) > 1 else sizes
    if sizes.sum() > shard_bytes:
        assert len(sizes) >= 2
        assert np.all(whole > 0.7 * shard_bytes) and np.all(whole < 1.4 * shard_bytes), sizes
    # shards hold a fixed count of samples, the last fewer
    counts = [x.samples for x in pack.shards]
    assert len(set(counts[:-1])) <= 1 and counts[-1] <= counts[0]


def test_statistics_do_not_depend_on_the_shard_size(demo_client):
    client, s = demo_client
    a = client.pack(s, 15, workers=1, progress=False, shard_bytes=70_000)
    b = client.pack(s, 15, workers=2, progress=False, shard_bytes=1 << 24)
    assert len(a.shards) > 3 and len(b.shards) == 1
    for name, st in a.stats.items():
        other = b.stats[name]
        assert st.count == other.count
        np.testing.assert_allclose(st.mean, other.mean, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(st.std, other.std, rtol=1e-9, atol=1e-12)
        np.testing.assert_array_equal(st.min, other.min)
        np.testing.assert_array_equal(st.percentiles, other.percentiles)
    assert LOWDIM in a.members


def test_a_full_scratch_disk_is_one_clear_error(demo_client, monkeypatch, tmp_path):
    from rayform.errors import ScratchError
    from rayform.packer.scratch import writing

    full = r"pack scratch in /dev: cannot write \(No space left on device\).*TMPDIR"
    with pytest.raises(ScratchError, match=full), writing("/dev"), open("/dev/full", "wb") as f:
        f.write(b"x" * 100_000)
    client, s = demo_client
    (tmp_path / "a-file").write_bytes(b"")
    monkeypatch.setattr(scratch_module, "SCRATCH", str(tmp_path / "a-file" / "scratch"))
    with pytest.raises(ScratchError, match="pack scratch in .*a-file"):
        client.pack(s, 15, workers=1, progress=False, **SPEC)
    assert not list(client.store.list_refs("refs/packs")), "a pack ref was written"


def test_a_run_gone_from_the_store_is_one_error_of_ours(demo_client):
    from rayform.errors import BlobNotFound

    client, s = demo_client
    removed = []

    def remove(fn, job):
        if fn is write_shard and not removed:
            removed.append(job.sections[0].run)
            os.unlink(client.store.backend.blob_path(removed[0]))

    with Recording(before=remove) as ex, pytest.raises(BlobNotFound, match="not in"):
        client.pack(s, 15, executor=ex, progress=False, **SPEC)
    assert removed and not list(client.store.list_refs("refs/packs"))


def test_a_blob_range_is_read_unverified_and_bounded(client):
    from rayform.errors import BlobNotFound

    digest = client.store.put_blob(b"0123456789")
    assert client.store.backend.read_range(digest, 2, 5) == b"23456"
    assert client.store.backend.read_range(digest, 8, 5) == b"89"
    with pytest.raises(BlobNotFound):
        client.store.backend.read_range("ab" * 32, 0, 4)
