"""Each health signal on streams made to show it, and on the same streams clean."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import moving_texture
from hypothesis import given, settings
from hypothesis import strategies as st

from rayform.codec import imagecodec
from rayform.recordings import health

NS = 1_000_000_000


def _ts(n: int, hz: float = 30.0) -> np.ndarray:
    return np.round(np.arange(n) * NS / hz).astype(np.int64)


def _kinds(findings) -> dict[str, float]:
    return {f.kind: f.value for f in findings if f.flagged}


def test_a_camera_frozen_for_two_seconds_and_its_blank_frames():
    frames = [imagecodec.encode_jpeg(f, 90) for f in moving_texture(150, 64)]
    assert _kinds(health.frames("cam", _ts(150), frames)) == {}
    frozen = frames[:30] + [frames[30]] * 61 + frames[91:]
    [f] = [f for f in health.frames("cam", _ts(150), frozen) if f.kind == "frozen"]
    assert f.value == pytest.approx(2.0, abs=0.01) and f.start_ns == _ts(150)[30] and f.flagged
    black = imagecodec.encode_jpeg(np.zeros((64, 64, 3), np.uint8), 90)
    blanked = frames[:10] + [black] * 4 + frames[14:]
    [b] = [f for f in health.frames("cam", _ts(150), blanked) if f.kind == "blank"]
    assert b.value == 4 and b.start_ns == _ts(150)[10]
    raw = moving_texture(60, 16)
    raw[5:40] = raw[5]
    assert _kinds(health.frames("raw", _ts(60), raw))["frozen"] == pytest.approx(34 / 30, abs=0.01)


def test_a_frozen_stretch_of_recorded_video_is_found_from_its_packets_alone():
    from rayform.codec.video_encoder import VideoCodec

    pictures = moving_texture(120, 64)
    clean = VideoCodec("h264", None, clip_frames=30).encode(pictures)
    keys = np.isin(np.arange(120), clean.keys)
    sizes = np.array([len(p) for p in clean.packets])
    assert _kinds(health.video("cam", _ts(120), _ts(120), sizes, keys)) == {}
    pictures[40:100] = pictures[40]
    frozen = VideoCodec("h264", None, clip_frames=30).encode(pictures)
    sizes = np.array([len(p) for p in frozen.packets])
    found = _kinds(health.video("cam", _ts(120), _ts(120), sizes, np.isin(np.arange(120), frozen.keys)))
    assert found.get("frozen", 0) >= 1.0, sizes.tolist()


def test_dropped_frames_a_gap_and_repeated_times():
    ts = _ts(300)
    assert _kinds(health.timing("cam", np.delete(ts, [50, 120]))) == {}  # a frame lost now and then is normal
    gone = np.delete(ts, np.arange(100, 130))
    found = _kinds(health.timing("cam", gone))
    assert found["dropped"] == pytest.approx(30 / 300) and found["gap"] == pytest.approx(31 / 30, abs=1e-3)
    twice = np.insert(ts, 10, ts[10])
    assert _kinds(health.timing("cam", twice))["duplicate_time"] == 1


def test_constant_elements_spikes_and_pose_jumps():
    t = _ts(500, 100.0)
    rng = np.random.default_rng(0)
    q = np.cumsum(rng.normal(0, 0.01, (500, 6)), axis=0) + np.sin(np.linspace(0, 6, 500))[:, None]
    assert _kinds(health.arrays("q", t, q)) == {}
    flat = q.copy()
    flat[:, [1, 4]] = 0.5
    assert _kinds(health.arrays("q", t, flat)) == {"constant": 2}
    spiked = q.copy()
    spiked[200:205, 3] = 1e6
    [s] = [f for f in health.arrays("q", t, spiked) if f.kind == "spike"]
    assert s.flagged and 200 <= (s.start_ns - t[0]) * 100 // NS < 205
    fast = q.copy()
    fast[250:, 2] += 0.3  # a quick real move, a tenth of the range: not a spike
    assert "spike" not in _kinds(health.arrays("q", t, fast))
    pose = np.zeros((500, 7))
    pose[:, 0] = np.linspace(0, 1, 500)
    pose[:, 6] = 1
    assert _kinds(health.arrays("p", t, pose, "pose")) == {}
    pose[300:, 1] += 2.0
    assert "pose_jump" in _kinds(health.arrays("p", t, pose, "pose"))


def test_the_summary_keeps_the_worst_of_each_kind_and_only_flagged_findings():
    found = [health.Finding("spike", "a", 3.0, 0, 0), health.Finding("spike", "b", 80.0, 5, 5),
             health.Finding("frozen", "cam", 0.2, 1, 2)]
    s = health.summary(found)
    assert s["signals"] == {"spike": 80.0, "frozen": 0.2} and s["flags"] == ["spike"]
    assert [f["stream"] for f in s["findings"]] == ["b"]


def test_rayform_health_off_stores_without_measuring_read_when_a_segment_is_written(client, monkeypatch):
    import rayform

    t = _ts(40, 10.0)
    q = np.zeros((40, 3))
    monkeypatch.setenv("RAYFORM_HEALTH", "off")  # after import: read at the write, not at import
    client.segments.add("lab", "off", [rayform.ArrayStream("q", t, q)])
    monkeypatch.delenv("RAYFORM_HEALTH")
    client.segments.add("lab", "on", [rayform.ArrayStream("q", t, q)])
    rows = {r["name"]: r for r in client.segments.catalog.latest(columns=["name", "health", "flags"]).to_pylist()}
    assert rows["off"]["health"] is None and rows["off"]["flags"] is None
    assert rows["on"]["flags"] == ["constant"]


def test_a_stream_starting_late_or_ending_early_against_the_others():
    t = _ts(300, 30.0)  # 10 s
    streams = {"cam/rgb": t, "joints": t, "tf": t + 3 * NS // 2, "gripper": t[: 300 - 60]}  # late 1.5 s; short 2 s
    found = {f.stream: f for f in health.spans(streams)}
    assert found["tf"].value == pytest.approx(1.5) and (found["tf"].start_ns, found["tf"].end_ns) == (0, 3 * NS // 2)
    assert found["gripper"].value == pytest.approx(2.0, abs=0.04) and found["gripper"].end_ns == int(t[-1])
    assert _kinds(found.values()) == {"misaligned": pytest.approx(2.0, abs=0.04)}
    assert "cam/rgb" not in found and "joints" not in found  # on time: the others' median is theirs
    near = {"cam/rgb": t, "joints": t + NS // 3}  # drivers up a third of a second apart: normal
    assert not _kinds(health.spans(near)) and health.spans({"only": t}) == []
    assert health.spans({"odom": t + 250 * NS, "static": t[:1]}) == []  # a static transform spans no time


def test_a_late_camera_is_flagged_at_ingest_and_found_by_query(client):
    import rayform

    t = _ts(300, 30.0)
    joints = np.cumsum(np.random.default_rng(0).normal(0, 0.01, (300, 4)), axis=0)
    frames = moving_texture(300, 16)
    good = client.segments.add("lab", "good", [rayform.ImageStream("cam/rgb", t, frames),
                                               rayform.ArrayStream("joints", t, joints)])
    late = client.segments.add("lab", "late", [rayform.ImageStream("cam/rgb", t[90:], frames[90:]),
                                               rayform.ArrayStream("joints", t, joints)])
    flagged = client.slices.create(where="'misaligned' in flags")
    assert [s.id for s in flagged.segments] == [late.id] and good.id not in {s.id for s in flagged.segments}
    assert [s.id for s in client.slices.create(where="health.misaligned >= 2.9").segments] == [late.id]


def test_values_outside_a_streams_declared_limits_at_ingest_and_by_doctor(client):
    """A joint declares its limits; three samples past one are flagged out_of_range with their
    times, at ingest and again by doctor's measuring of the stored segment (the limits are in
    the manifest); a stream inside its limits, or declaring none, is not."""
    from rayform import ArrayStream
    from rayform.ops.doctor import measure

    ts = _ts(200, 50)
    q = np.tile(np.linspace(-1, 1, 200, dtype=np.float32)[:, None], (1, 3))
    past = q.copy()
    past[[40, 41, 90], 1] = 2.5  # a wrap of the encoder, say
    limits = ([-1.5, -2.0, -1.5], 1.5)  # one a column, or one for all
    refs = client.segments.add_many([
        ("lab", "inside", [ArrayStream("joints", ts, q, limits=limits)], {}),
        ("lab", "past", [ArrayStream("joints", ts, past, limits=limits)], {}),
        ("lab", "undeclared", [ArrayStream("joints", ts, past)], {}),
    ])
    summary = refs[1].row.health
    [f] = [f for f in summary["findings"] if f["kind"] == "out_of_range"]
    assert (f["value"], f["start_ns"], f["end_ns"], f["stream"]) == (3, ts[40], ts[90], "joints")
    flagged = client.slices.create(where="'out_of_range' in flags")
    assert [s.id for s in flagged.segments] == [refs[1].id]  # not the one inside, nor the one declaring none
    stored = client.segments.get(refs[1].id)
    assert stored.streams["joints"].meta["limits"] == [[-1.5, -2.0, -1.5], [1.5, 1.5, 1.5]]
    assert [g for g in measure(stored)["findings"] if g["kind"] == "out_of_range"] == [f]


@pytest.mark.parametrize("limits, said", [((1.0, -1.0), "above its high"), (([0, 0], 1), "2 limits for 3"),
                                          (("a", 1), "numbers"), ((0,), "(low, high)"), ((float("nan"), 1), "NaN")])
def test_limits_that_make_no_sense_are_refused_naming_the_stream(client, limits, said):
    from rayform import ArrayStream
    from rayform.errors import InvalidInput

    with pytest.raises(InvalidInput, match=rf"stream joints: limits .*{said}"):
        client.segments.add("lab", "bad", [ArrayStream("joints", _ts(20), np.zeros((20, 3), np.float32), limits=limits)])


@pytest.mark.parametrize("limits", [[10**400, 1], [{"a": 1}, 1], ["x", 1], [[1, [2]], 1], [[1] * 5000, 1], "ab",
                                    [1, 2, 3], [[[1] * 5000], 1], [float("nan"), 1], [2, 1]])
def test_limits_a_store_declares_are_checked_as_untrusted_one_error_kind_whatever_they_hold(limits):
    """A manifest's ``meta["limits"]`` is a store's text: whatever it holds is one ValueError
    (doctor then measures nothing against it), never another exception."""
    with pytest.raises(ValueError):
        health.declared_limits(limits, 2)


def test_segments_written_together_are_measured_in_batches_each_its_own(client, monkeypatch):
    import rayform
    from rayform.recordings import segment_writer

    monkeypatch.setattr(segment_writer, "HEALTH_BATCH", 3)  # 8 segments: batches of 3, 3 and the 2 at finish
    rng = np.random.default_rng(5)
    segments, want = [], {}
    for k in range(8):
        n = [40, 60, 61, 200][k % 4]
        t = _ts(n, 10.0)
        q = np.cumsum(rng.normal(0, 0.01, (n, 4)), axis=0)
        if k % 3 == 0:
            q[n // 2, 1] = 1e6
        if k % 3 == 1:
            q[:, 2] = 0.25
        arrays = [("q", t, q), ("v", t, np.diff(q, axis=0, prepend=0.0))]
        segments.append(("lab", f"ep{k}", [rayform.ArrayStream(*a) for a in arrays], None))
        want[f"ep{k}"] = sorted({f.kind for f in health.arrays_together(arrays) if f.flagged})  # each alone
    client.segments.add_many(segments)
    rows = {r["name"]: r for r in client.segments.catalog.latest(columns=["name", "flags"]).to_pylist()}
    assert {name: rows[name]["flags"] or [] for name in want} == want
    assert want["ep0"] == ["spike"] and want["ep1"] == ["constant"] and want["ep2"] == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 1, 1, 2, 3, 5]), min_size=2, max_size=300), st.integers(1, 10**8))
def test_a_short_clock_screened_from_a_list_finds_what_the_full_measure_does(steps, period):
    ts = np.cumsum([0, *steps]).astype(np.int64) * period
    screened = health.timing("clock", ts)
    was, health._SHORT = health._SHORT, 0  # every clock measured in full
    try:
        assert screened == health.timing("clock", ts)
    finally:
        health._SHORT = was


@settings(max_examples=300, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=80), st.lists(st.sampled_from([0, 1, 2, 7]), min_size=81,
                                                                    max_size=81))
def test_the_longest_frozen_run_is_the_definitions(same, steps):
    """Frames i+1 the same as i where ``same[i]``: the finding spans the run of repeats whose
    times span most (the first of them on a tie), from its first frame to its last."""
    ts = np.cumsum(steps).astype(np.int64)[:len(same) + 1] * 1000
    runs, k = [], 0
    while k < len(same):  # runs same[a..b]: frames a .. b + 1
        if same[k]:
            a = k
            while k + 1 < len(same) and same[k + 1]:
                k += 1
            runs.append((int(ts[k + 1] - ts[a]), a, k + 1))
        k += 1
    want = max(runs, key=lambda r: r[0]) if runs else None  # max keeps the first of equal spans
    got = health._frozen("cam", ts, [i for i, s in enumerate(same) if s])
    assert [(f.value, f.start_ns, f.end_ns) for f in got] == (
        [(want[0] / 1e9, int(ts[want[1]]), int(ts[want[2]]))] if want else [])
