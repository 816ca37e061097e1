"""The sample builder: every key, shape and dtype; delta actions by hand; padding; errors."""

from __future__ import annotations

import numpy as np
import pytest

from rayform import ArrayStream, ImageStream, PoseStream
from rayform.codec import imagecodec, records
from rayform.errors import InvalidInput, Malformed, StreamNotFound
from rayform.pack.layout import LOWDIM
from rayform.read.reader import PackReader
from rayform.sample.builder import SampleBuilder
from rayform.sample.spec import SampleSpec

MS = 1_000_000


@pytest.fixture
def ramp(client):
    """x(t) = (t, 2t, -t) in seconds at 100 Hz for 2 s, a 30 Hz camera, a fixed pose."""
    jt = np.arange(0, 2001, 10, dtype=np.int64) * MS
    x = np.stack([jt / 1e9, 2 * jt / 1e9, -jt / 1e9], axis=1).astype(np.float32)
    ct = np.arange(0, 2001, 33, dtype=np.int64) * MS
    frames = [imagecodec.encode_jpeg(np.full((12, 20, 3), i % 255, np.uint8), 95) for i in range(len(ct))]
    pose = np.tile([1.0, 2.0, 3.0, 0, 0, 0, 1], (len(jt), 1))
    ref = client.segments.add("lab", "ramp", [
        ImageStream("cam0/rgb", ct, frames),
        ArrayStream("joints/position", jt, x, units="rad"),
        PoseStream("ee/pose", jt, pose, frame="ros"),
    ])
    s = client.slices.create([ref])
    pack = client.pack(s, 10, workers=1, progress=False, max_horizon=8)
    return s, pack, client.store


def _all(store, pack, builder):
    reader = PackReader(store, pack, builder.members)
    built = [builder.build(raw, key) for key, raw in reader.raw_many(range(pack.samples))]
    return sorted(built, key=lambda x: (x["meta"]["segment"], int(x["t_ns"])))  # time order, whatever the layout


def test_keys_shapes_and_dtypes(ramp):
    s, pack, store = ramp
    spec = SampleSpec.of(("cam0/rgb", "joints/position", "ee/pose"), "joints/position_delta", horizon=4, frame="ros")
    b = SampleBuilder(pack, spec)
    x = _all(store, pack, b)[3]
    assert set(x) == {"cam0/rgb", "joints/position", "ee/pose", "action", "action_is_pad", "t_ns", "meta"}
    assert x["cam0/rgb"].shape == (3, 12, 20) and x["cam0/rgb"].dtype == np.uint8
    assert x["joints/position"].shape == (3,) and x["joints/position"].dtype == np.float32
    assert x["ee/pose"].shape == (7,) and x["ee/pose"].dtype == np.float32
    assert x["action"].shape == (4, 3) and x["action"].dtype == np.float32
    assert x["action_is_pad"].shape == (4,) and x["action_is_pad"].dtype == bool
    assert x["t_ns"].shape == () and x["t_ns"].dtype == np.int64
    assert x["meta"] == {"slice": s.id, "segment": s.segments[0].id, "segment_version": s.segments[0].version,
                         "site": "lab", "task": "", "episode_index": 0, "frame_index": 3}  # the 4th grid step


def test_delta_actions_against_hand_computed_values(ramp):
    _, pack, store = ramp
    b = SampleBuilder(pack, SampleSpec.of(("joints/position",), "joints/position_delta", horizon=4))
    for x in _all(store, pack, b)[:5]:
        t = x["t_ns"] / 1e9
        np.testing.assert_allclose(x["joints/position"], [t, 2 * t, -t], atol=1e-6)
        k = np.arange(1, 5)[:, None] * 0.1  # x(t + (k+1)/fps) - x(t), k = 0..3
        np.testing.assert_allclose(x["action"], k * np.array([1, 2, -1]), atol=1e-5)
        assert not x["action_is_pad"].any()


def test_plain_stream_actions_are_future_values(ramp):
    _, pack, store = ramp
    b = SampleBuilder(pack, SampleSpec.of(("cam0/rgb",), "joints/position", horizon=3))
    x = _all(store, pack, b)[0]
    t = x["t_ns"] / 1e9
    np.testing.assert_allclose(x["action"][:, 0], t + np.array([0.1, 0.2, 0.3]), atol=1e-6)


def test_padding_at_the_segment_end_holds_the_last_value(ramp):
    _, pack, store = ramp
    b = SampleBuilder(pack, SampleSpec.of(("joints/position",), "joints/position_delta", horizon=8))
    last = _all(store, pack, b)[-1]
    t = last["t_ns"] / 1e9
    steps = t + 0.1 * np.arange(1, 9)
    assert last["action_is_pad"].tolist() == (steps > 2.0 + 1e-9).tolist()
    assert last["action_is_pad"].any()
    held = last["action"][last["action_is_pad"]]
    np.testing.assert_allclose(held, np.tile(np.array([2.0, 4.0, -2.0]) - [t, 2 * t, -t], (len(held), 1)), atol=1e-5)


def test_frame_conversion_applies_to_poses(ramp):
    _, pack, store = ramp
    b = SampleBuilder(pack, SampleSpec.of(("ee/pose",), None, horizon=1, frame="optical"))
    x = _all(store, pack, b)[0]
    np.testing.assert_allclose(x["ee/pose"][:3], [-2.0, -3.0, 1.0], atol=1e-6)


@pytest.mark.parametrize(
    "spec, error, message",
    [
        (SampleSpec.of(("depth",), None), StreamNotFound, "no stream 'depth'.*It has"),
        (SampleSpec.of(("cam0/rgb",), "cam0/rgb_delta"), InvalidInput, "image stream"),
        (SampleSpec.of(("cam0/rgb",), ["joints/position_delta", "gripper"]), StreamNotFound, "action 'gripper'"),
        (SampleSpec.of(("cam0/rgb",), "joints/position_delta", horizon=9), InvalidInput, "horizon 9 is beyond.*--horizon 9"),
    ],
)
def test_bad_requests_fail_at_construction(ramp, spec, error, message):
    _, pack, store = ramp
    with pytest.raises(error, match=message):
        SampleBuilder(pack, spec)


def _claiming(jpeg: bytes, height: int, width: int) -> bytes:
    """The JPEG with its frame header (SOF0) claiming another size; the scan is unchanged."""
    at = jpeg.index(b"\xff\xc0") + 5  # marker, length (2), precision (1): then height, width
    return jpeg[:at] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + jpeg[at + 4:]


@pytest.mark.parametrize("size", [(16000, 16000), (12, 10), (6, 20)])
def test_an_image_whose_header_claims_another_size_is_refused_before_it_is_allocated(ramp, size):
    """Decoded straight into its batch row, a JPEG is not read for its header first: the decoder
    must still refuse it, allocating nothing of what the header claims, with the header's size named."""
    import tracemalloc

    _, pack, store = ramp
    b = SampleBuilder(pack, SampleSpec.of(("cam0/rgb",), "joints/position", horizon=4))
    key, raw = PackReader(store, pack, b.members).raw(0)
    member = b.images[0].member
    raw = {**raw, member: _claiming(bytes(raw[member]), *size)}
    tracemalloc.start()
    try:
        with pytest.raises(Malformed, match=f"its header says {size[1]}x{size[0]}, the schema 20x12"):
            b.build(raw, key)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20  # numpy's allocations are traced
    finally:
        tracemalloc.stop()


def test_a_record_unlike_those_read_before_is_checked_in_full(ramp):
    """Once a record's arrays have been checked, records alike are read by comparison: one that
    differs in dtype is still read right, one that differs in shape is refused."""
    _, pack, store = ramp
    b = SampleBuilder(pack, SampleSpec.of(("joints/position",), "joints/position_delta", horizon=4))
    key, raw = PackReader(store, pack, b.members).raw(3)
    first = b.build(raw, key)
    low = records.loads(bytes(raw[LOWDIM]))
    future = records.unpack_array(low["arrays"]["joints/position"]["future"])
    low["arrays"]["joints/position"]["future"] = records.pack_array(future.astype(np.float64))
    again = b.build({**raw, LOWDIM: records.dumps(low)}, key)
    assert np.array_equal(again["action"], first["action"]) and np.array_equal(again["joints/position"],
                                                                              first["joints/position"])
    rows = b.rows(2)  # in one batch with a record like the first: its column is read entry by entry
    b.fill([raw, {**raw, LOWDIM: records.dumps(low)}], [key, key], rows)
    assert np.array_equal(rows["action"][0], first["action"]) and np.array_equal(rows["action"][1], first["action"])
    low["arrays"]["joints/position"]["future"] = records.pack_array(future[:, :2])
    with pytest.raises(Malformed, match=r"joints/position is \(9, 2\), the pack says \(9, 3\)"):
        b.build({**raw, LOWDIM: records.dumps(low)}, key)
    low["arrays"]["joints/position"]["future"] = {**records.pack_array(future), "shape": [9, 4]}
    with pytest.raises(Malformed, match="holds 108 bytes"):
        b.build({**raw, LOWDIM: records.dumps(low)}, key)


@pytest.fixture
def turning(client):
    """A pose turning about z and moving along x, joints ramping, at 100 Hz for 3 s; a 30 Hz camera."""
    jt = np.arange(0, 3001, 10, dtype=np.int64) * MS
    t = jt / 1e9
    half = 0.4 * t / 2
    pose = np.stack([t, 0.5 * t, np.zeros_like(t), np.zeros_like(t), np.zeros_like(t), np.sin(half), np.cos(half)], 1)
    ct = np.arange(0, 3001, 33, dtype=np.int64) * MS
    frames = [imagecodec.encode_jpeg(np.full((12, 20, 3), (7 * i) % 255, np.uint8), 95) for i in range(len(ct))]
    ref = client.segments.add("lab", "turning", [
        ImageStream("cam0/rgb", ct, frames),
        ArrayStream("joints/position", jt, np.stack([t, t * t], 1).astype(np.float32)),
        PoseStream("ee/pose", jt, pose, frame="ros"),
    ])
    s = client.slices.create([ref])
    return client.pack(s, 10, workers=1, progress=False, max_horizon=6, max_history=3), client.store


def test_a_batch_built_whole_holds_what_each_sample_built_alone_holds(turning):
    """``fill`` computes a batch's arrays together (pose deltas, rotations, frames, history
    along a batch axis): each row equals that sample built alone, whatever row it is put in."""
    pack, store = turning
    spec = SampleSpec.of(("cam0/rgb", "joints/position", "ee/pose"), ["ee/pose_delta", "joints/position"], horizon=5,
                      frame="optical", rotation="rot6d", history={"cam0/rgb": 3, "joints/position": 2})
    b = SampleBuilder(pack, spec)
    read = PackReader(store, pack, b.members).raw_many(range(pack.samples))
    rows = b.rows(pack.samples)
    at = np.random.default_rng(0).permutation(pack.samples).tolist()
    metas = b.fill([raw for _, raw in read], [key for key, _ in read], rows, at)
    for (key, raw), j, meta in zip(read, at, metas):
        alone = b.build(raw, key)
        together = b.sample(rows, j, meta)
        assert together.keys() == alone.keys()
        for k in alone:
            assert np.array_equal(together[k], alone[k]) if k != "meta" else together[k] == alone[k], (key, k)
    action = rows["action"][at[-1]]
    assert action.shape == (5, 9 + 2) and not np.allclose(action[:, 3:9], action[0, 3:9])  # the pose turns
