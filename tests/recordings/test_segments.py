"""Segments: add, list by site, versions, and refusing bad input."""

from __future__ import annotations

import os

import numpy as np
import pytest

import rayform
from rayform import ArrayStream, ImageStream, PoseStream
from rayform.codec import imagecodec
from rayform.errors import IntegrityError, InvalidInput, SegmentNotFound, StreamNotFound


def _streams(offset: float = 0.0, n: int = 20):
    ts = np.arange(n, dtype=np.int64) * 10_000_000
    frames = [imagecodec.encode_jpeg(np.full((16, 16, 3), i * 10, np.uint8)) for i in range(n)]
    q = np.tile([0, 0, 0, 1.0], (n, 1))
    return [
        ImageStream("cam0/rgb", ts, frames),
        ArrayStream("joints/position", ts, np.arange(n * 3, dtype=np.float32).reshape(n, 3) + offset,
                    units="rad", names=["a", "b", "c"]),
        PoseStream("ee/pose", ts, np.hstack([np.zeros((n, 3)), q]), frame="ros"),
    ]


def test_add_returns_id_and_version_and_reads_back(client):
    ref = client.segments.add("lab", "ep1", _streams(), meta={"task": "pick"})
    assert ref.id.startswith("seg_") and len(ref.version) == 64
    seg = client.segments.get(ref.id)
    assert seg.version == ref.version and seg.meta == {"task": "pick"}
    assert seg.streams["joints/position"].names == ("a", "b", "c")
    np.testing.assert_array_equal(seg.values("joints/position")[1], [3, 4, 5])
    assert seg.frame_bytes("cam0/rgb", 3) == _streams()[0].frames[3]
    assert seg.frame_array("cam0/rgb", 3).shape == (16, 16, 3)
    assert seg.streams["ee/pose"].frame == "ros"


def test_list_by_site(client):
    client.segments.add("lab", "ep1", _streams())
    client.segments.add("lab", "ep2", _streams())
    client.segments.add("field", "ep1", _streams())
    assert [r.name for r in client.segments.list("lab")] == ["ep1", "ep2"]
    assert [r.site for r in client.segments.list("field")] == ["field"]
    assert len(client.segments.list()) == 3
    assert client.segments.sites() == ["field", "lab"]


def test_a_changed_segment_gets_a_new_version_and_the_old_stays_readable(client):
    v1 = client.segments.add("lab", "ep1", _streams(0.0))
    same = client.segments.add("lab", "ep1", _streams(0.0))
    v2 = client.segments.add("lab", "ep1", _streams(1.0))
    assert same.version == v1.version and v2.version != v1.version and v2.id == v1.id
    assert client.segments.versions(v1.id) == [v1.version, v2.version]
    assert client.segments.get(v1.id).version == v2.version
    old = client.segments.get(v1.id, v1.version)
    assert old.values("joints/position")[0, 0] == 0.0
    assert client.segments.get(v1.id, v2.version).values("joints/position")[0, 0] == 1.0


def test_raw_image_frames_are_kept_losslessly(client):
    ts = np.arange(4, dtype=np.int64)
    depth = np.random.default_rng(0).integers(0, 65535, (4, 8, 8), dtype=np.uint16)
    ref = client.segments.add("lab", "depth", [ImageStream("depth", ts, depth)])
    seg = client.segments.get(ref.id)
    assert seg.streams["depth"].encoding == "raw"
    np.testing.assert_array_equal(seg.frame_array("depth", 2), depth[2])


@pytest.mark.parametrize(
    "stream, message",
    [
        (ArrayStream("joints.position", [0, 1], np.zeros((2, 1))), "no dots"),
        (ArrayStream("action", [0, 1], np.zeros((2, 1))), "none of"),
        (ArrayStream("x", [0, 2, 1], np.zeros((3, 1))), "timestamp 2"),
        (ArrayStream("x", [0.0, 1.0], np.zeros((2, 1))), "int64 nanoseconds"),
        (ArrayStream("x", [0, 1, 2], np.zeros((2, 1))), "3 timestamps for 2"),
        (PoseStream("p", [0], np.array([[0, 0, 0, 0, 0, 0, 2.0]])), "norm"),
        (PoseStream("p", [0], np.array([[0, 0, 0, 0, 0, 0, 1.0]]), frame="ned"), "frame"),
        (ImageStream("cam", [0, 1], [b"\xff\xd8\xffabc", b"GIF89a.."]), "neither JPEG nor PNG"),
    ],
)
def test_bad_streams_are_refused_with_one_clear_error(client, stream, message):
    with pytest.raises(InvalidInput, match=message):
        client.segments.add("lab", "bad", [stream])
    assert client.segments.list() == []


def test_unknown_segment_and_stream(client):
    with pytest.raises(SegmentNotFound, match="seg_000000000000"):
        client.segments.get("seg_000000000000")
    ref = client.segments.add("lab", "ep1", _streams())
    with pytest.raises(StreamNotFound, match="no stream 'wrist/rgb'.*cam0/rgb"):
        client.segments.get(ref.id).timestamps("wrist/rgb")


def test_a_corrupt_segment_blob_is_one_clear_error(client, tmp_path):
    """A byte flipped in a bundle is found when it is opened (in a new process: one that has
    mapped it already checks each member it reads)."""
    ref = client.segments.add("lab", "ep1", _streams())
    seg = client.segments.get(ref.id)
    digest = seg.bundle.digest
    path = client.store.backend.blob_path(digest)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    os.chmod(path, 0o644)
    open(path, "wb").write(bytes(data))
    fresh = rayform.Client(tmp_path / "store")
    from rayform.recordings import bundles

    bundles._OPEN.clear()  # as a new process
    with pytest.raises(IntegrityError, match=digest[:16]):
        fresh.segments.get(ref.id).values("joints/position")


def test_a_failed_write_with_nothing_to_take_back_says_nothing(client, monkeypatch, caplog):
    """An offline store refuses every write, take-backs too: a write that failed before storing
    anything must not warn that it could not take back its 0 blobs before its real error."""
    def refused(blobs):
        raise rayform.errors.OfflineError("offline")

    monkeypatch.setattr(client.store, "take_back", refused)
    client.segments.discard([])
    assert "could not take back" not in caplog.text


def test_a_write_whose_blob_went_before_its_commit_records_nothing(client, monkeypatch):
    """gc with a grace shorter than a write (``--force``) deleted one of its blobs meanwhile:
    the commit checks them and fails, naming the fix, rather than name data that is gone."""
    from rayform.recordings.segments import Segments

    t = np.arange(400_000, dtype=np.int64)  # a loose blob (small ones are bundled)
    real = Segments.store_many

    def then_deleted(self, *a, **k):
        refs = real(self, *a, **k)
        seg_blob = client.store.backend.blob_path(rayform.store.content.sha256_hex(records_npy(t)))
        os.unlink(seg_blob)
        return refs

    monkeypatch.setattr(Segments, "store_many", then_deleted)
    with pytest.raises(rayform.errors.StoreError, match="deleted before its commit.*longer --grace"):
        client.segments.add("lab", "ep", [ArrayStream("j", t, np.zeros((len(t), 1), np.float32))])
    assert client.segments.sites() == []


def records_npy(a):
    from rayform.codec import records

    return records.to_npy(a)


def test_a_ctrl_c_held_through_the_commit_leaves_the_write_whole(client, monkeypatch):
    """A Ctrl-C during the commit is held, and answered as the hold ends: the segments are
    recorded by then, and their blobs must stay (taking them back would leave the catalog
    naming blobs that are gone; the write does not try, and the blobs' freshening at confirm
    would refuse it besides)."""
    import contextlib

    from rayform.ops.references import store_closure
    from rayform.ops.verify import verify
    from rayform.recordings import segments as segments_module

    @contextlib.contextmanager
    def answered_as_the_hold_ends():
        yield
        raise KeyboardInterrupt

    monkeypatch.setattr(segments_module, "held", answered_as_the_hold_ends)
    with pytest.raises(KeyboardInterrupt):
        client.segments.add_many([("lab", "ep1", _streams(), {})])
    [segment] = client.segments.list("lab")
    np.testing.assert_array_equal(client.segments.get(segment.id).values("joints/position")[1], [3, 4, 5])
    assert verify(client.store, store_closure(client.store)).ok
