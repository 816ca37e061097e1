"""The reference walk: what each kind of object names is exactly what was written for it, for
every kind of stream there is (a new kind not described to the walk fails here, not a user)."""

from __future__ import annotations

import json
import re
import typing

import numpy as np
import pytest
from conftest import moving_texture, recorded_video

import rayform
from rayform.codec import imagecodec
from rayform.ops.references import pack_closure, segment_version, slice_closure, store_closure
from rayform.recordings.streams import Stream

T = np.arange(12, dtype=np.int64) * 33_333_333
DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _jpeg() -> rayform.ImageStream:
    return rayform.ImageStream("cam/jpeg", T, [imagecodec.encode_jpeg(f) for f in moving_texture(12, 32)])


def _png() -> rayform.ImageStream:
    return rayform.ImageStream("cam/png", T, [imagecodec.encode_png(f) for f in moving_texture(12, 32, seed=1)])


def _raw() -> rayform.ImageStream:
    return rayform.ImageStream("cam/depth", T, np.arange(12 * 8 * 8, dtype=np.uint16).reshape(12, 8, 8))


def _array() -> rayform.ArrayStream:
    return rayform.ArrayStream("joints", T, np.random.default_rng(0).normal(size=(12, 6)).astype(np.float32))


def _pose() -> rayform.PoseStream:
    q = np.tile([0.0, 0.0, 0.0, 1.0], (12, 1))
    return rayform.PoseStream("ee/pose", T, np.concatenate([np.random.default_rng(1).normal(size=(12, 3)), q], axis=1))


def _video() -> rayform.VideoStream:
    return recorded_video(12, lead=2, size=32)[0]


# Every kind of stream a segment may hold, each with its ways of storing frames: a kind added to
# ``Stream`` without an example here fails ``test_every_kind_of_stream_has_an_example``.
EXAMPLES: dict[type, list[typing.Callable[[], Stream]]] = {
    rayform.ImageStream: [_jpeg, _png, _raw],
    rayform.ArrayStream: [_array],
    rayform.PoseStream: [_pose],
    rayform.VideoStream: [_video],
}
ALL = [make for makes in EXAMPLES.values() for make in makes]


def test_every_kind_of_stream_has_an_example():
    assert set(typing.get_args(Stream)) == set(EXAMPLES)


def _digests(doc) -> set[str]:
    """Every string in a JSON document that is a blob's name."""
    if isinstance(doc, dict):
        return {d for v in doc.values() for d in _digests(v)}
    if isinstance(doc, list):
        return {d for v in doc for d in _digests(v)}
    return {doc} if isinstance(doc, str) and DIGEST.fullmatch(doc) else set()


@pytest.mark.parametrize("make", ALL, ids=lambda m: m.__name__.strip("_"))
def test_a_segment_version_reaches_exactly_the_blobs_its_writing_stored(client, make):
    with client.store.recording_new_blobs() as written:
        ref = client.segments.add("lab", "ep", [make()])
    reached = {r.blob for r in segment_version(client.store, ref.id, ref.version)}
    parts = {p.part for p in client.segments.catalog.parts.listed()}  # the catalog part that lists it
    assert reached | parts == {b.digest for b in written} and len(parts) == 1
    # and every blob name in its manifest is one the walk follows, or a member of the bundle it
    # follows (the manifest's own, its small arrays): none is left to chance
    seg = client.segments.get(ref.id, ref.version)
    assert seg.bundle is not None and seg.bundle.digest in reached
    manifest = json.loads(bytes(seg.bundle.get(ref.version)))
    assert _digests(manifest) <= (reached | set(seg.bundle.digests())) - {ref.version}
    # and each is declared by its stream (``StreamInfo.blobs``), bundled or not: a small blob
    # rides in its bundle today, a large one (an hour of video's packet index) is a blob of its
    # own, and then only its declaration keeps it from gc and carries it in a push
    assert _digests(manifest) - {ref.version} == set(seg.blobs())


def test_a_slice_reaches_each_version_it_selects_and_what_they_name(client):
    a = client.segments.add("lab", "a", [_array(), _video()])
    b = client.segments.add("lab", "b", [_pose(), _raw()])
    s = client.slices.create([a, b, {"id": a.id, "start_ns": 0, "end_ns": 10}])
    expected = {s.digest} | {r.blob for ref in (a, b) for r in segment_version(client.store, ref.id, ref.version)}
    assert {r.blob for r in slice_closure(s)} == expected


@pytest.mark.parametrize("codec", ["jpeg", "h264"])
def test_a_pack_reaches_every_blob_it_wrote_and_names_nothing_else(client, codec):
    t = np.arange(30, dtype=np.int64) * 33_333_333
    joints = rayform.ArrayStream("joints", t, np.zeros((30, 2), np.float32))
    refs = [client.segments.add("lab", f"ep{i}", [rayform.ImageStream("cam/rgb", t, moving_texture(30, 96, i)), joints])
            for i in range(3)]
    s = client.slices.create(refs)
    before = {b.digest for b in client.store.backend.list_blobs()}
    pack = client.pack(s, 30, image_codec=codec, max_history=1, max_horizon=4, workers=1, progress=False,
                       shard_bytes=1 << 16)
    written = {b.digest for b in client.store.backend.list_blobs()} - before
    reached = {r.blob for r in pack_closure(pack)}
    assert written <= reached and len(pack.shards) > 1
    manifest = client.store.get_json_blob(pack.digest)
    # the manifest names its slice and segment versions (what it was made from) without holding
    # them: a pack is kept for its shards; the slice is kept by its own ref
    made_from = {manifest["slice_digest"], *(s["version"] for s in manifest["segments"])}
    assert _digests(manifest) - made_from <= reached


def test_the_store_walk_reaches_old_versions_and_every_ref(client):
    first = client.segments.add("lab", "ep", [_array()])
    second = client.segments.add("lab", "ep", [_array(), _pose()])
    assert first.version != second.version
    reached = {r.blob for r in store_closure(client.store)}
    for ref in (first, second):
        assert {r.blob for r in segment_version(client.store, ref.id, ref.version)} <= reached
    stored = {b.digest for b in client.store.backend.list_blobs()}
    assert reached == stored  # nothing written for these two versions is unreached, nothing reached is absent
    assert len(list(client.segments.catalog.parts.live("lab"))) == 2  # a part each: the catalog, reached too
