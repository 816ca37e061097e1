"""Time alignment rules: no image from the future, stale instants dropped, interpolation."""

from __future__ import annotations

import numpy as np
import pytest

from rayform.pack.spec import PackSpec
from rayform.packer import align

MS = 1_000_000


def test_grid_spacing_is_exact_in_nanoseconds():
    t = align.grid(1_000, 1_000 + 10**9, 15)
    assert len(t) == 16
    assert t[0] == 1_000 and t[-1] == 1_000 + 10**9
    assert np.all(np.diff(t) >= 66_666_666) and np.all(np.diff(t) <= 66_666_667)


def test_grid_at_29_97_fps_does_not_drift():
    t = align.grid(0, 3600 * 10**9, 30000 / 1001)
    assert abs(int(t[-1]) - round((len(t) - 1) * 1001 / 30000 * 1e9)) <= 1


@pytest.mark.parametrize("seed", range(5))
def test_an_image_is_never_taken_from_the_future(seed):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 10**9, 40)).astype(np.int64)
    t = np.sort(rng.integers(0, 10**9, 200)).astype(np.int64)
    idx, ok = align.image_indices(ts, t, tolerance_ns=10**9)
    assert np.all(ts[idx[ok]] <= t[ok])
    # and it is the latest such frame
    nxt = np.minimum(idx[ok] + 1, len(ts) - 1)
    assert np.all((nxt == idx[ok]) | (ts[nxt] > t[ok]))
    assert not ok[t < ts[0]].any()


def test_a_frame_at_exactly_the_instant_is_used():
    ts = np.array([0, 100, 200], np.int64)
    idx, ok = align.image_indices(ts, np.array([100, 199]), tolerance_ns=150)
    assert idx.tolist() == [1, 1] and ok.all()


def test_stale_images_are_rejected():
    ts = np.array([0, 33, 66, 200, 233], np.int64) * MS  # frames 100..200 ms lost
    t = np.array([70, 100, 150, 210], np.int64) * MS
    _, ok = align.image_indices(ts, t, tolerance_ns=50 * MS)
    assert ok.tolist() == [True, True, False, True]


def test_linear_interpolation_between_neighbours():
    ts = np.array([0, 10, 20], np.int64)
    v = np.array([[0.0, 1.0], [10.0, 3.0], [0.0, 5.0]], np.float32)
    out = align.interpolate(ts, v, np.array([0, 5, 10, 15, 20]))
    np.testing.assert_allclose(out, [[0, 1], [5, 2], [10, 3], [5, 4], [0, 5]])
    assert out.dtype == np.float32


def test_integer_and_bool_values_are_held_not_interpolated():
    ts = np.array([0, 10, 20], np.int64) * MS
    ints = np.array([[1], [5], [9]], np.int32)
    assert align.interpolate(ts, ints, np.array([0, 9, 10, 19, 20]) * MS)[:, 0].tolist() == [1, 1, 5, 5, 9]
    bools = np.array([False, True, False])
    assert align.interpolate(ts, bools, np.array([5, 10, 15]) * MS).tolist() == [False, True, True]
    # an instant within EXACT_NS before a recorded value is at it
    assert align.interpolate(ts, ints, np.array([10 * MS - align.EXACT_NS]))[:, 0].tolist() == [5]


def test_array_gaps_wider_than_twice_the_tolerance_are_rejected():
    ts = np.array([0, 10, 20, 100, 110], np.int64)
    ok = align.array_ok(ts, np.array([5, 15, 50, 105, 120]), tolerance_ns=15)
    assert ok.tolist() == [True, True, False, True, False]


def _quat_z(angle):
    return np.array([0, 0, np.sin(angle / 2), np.cos(angle / 2)])


def test_slerp_halfway_between_two_rotations_about_z():
    q = align.slerp(_quat_z(0)[None], _quat_z(np.pi / 2)[None], np.array([0.5]))
    np.testing.assert_allclose(q[0], _quat_z(np.pi / 4), atol=1e-12)


def test_slerp_takes_the_short_way_round():
    q0 = _quat_z(np.deg2rad(170))
    q1 = -_quat_z(np.deg2rad(-170))  # the same rotation as -170°, sign flipped
    mid = align.slerp(q0[None], q1[None], np.array([0.5]))[0]
    angle = 2 * np.arctan2(mid[2], mid[3])
    assert abs(abs(np.rad2deg(angle)) - 180) < 1e-9


def test_slerp_of_nearly_equal_quaternions_is_stable():
    q0 = _quat_z(0.3)
    q = align.slerp(q0[None], (q0 + 1e-12)[None] / np.linalg.norm(q0 + 1e-12), np.array([0.5]))
    np.testing.assert_allclose(q[0], q0, atol=1e-9)


def test_pose_interpolation_is_linear_in_position_and_slerp_in_rotation():
    ts = np.array([0, 100], np.int64)
    poses = np.array([[0, 0, 0, *_quat_z(0)], [2, 4, 6, *_quat_z(np.pi / 2)]])
    out = align.interpolate(ts, poses, np.array([25]), kind="pose")[0]
    np.testing.assert_allclose(out[:3], [0.5, 1.0, 1.5])
    np.testing.assert_allclose(out[3:], _quat_z(np.pi / 8), atol=1e-12)


def test_future_window_values_and_padding_past_the_end():
    ts = np.arange(0, 1_000 * MS + 1, 10 * MS, dtype=np.int64)  # 100 Hz, 0..1 s
    v = (ts / 1e9).astype(np.float64)[:, None]  # x(t) = t seconds
    spec = PackSpec(fps=10, max_horizon=3)
    future, pad = align.future_window(ts, v, spec.future_instants(0, np.array([0, 9])), end_ns=int(ts[-1]))
    np.testing.assert_allclose(future[0, :, 0], [0.0, 0.1, 0.2, 0.3])
    assert not pad[0].any()
    np.testing.assert_allclose(future[1, :, 0], [0.9, 1.0, 1.0, 1.0])  # held at the end
    assert pad[1].tolist() == [False, False, True, True]


def test_an_instant_that_rounds_onto_the_end_is_on_the_grid():
    # 30 fps frames resampled at 15 fps: 383 frames end at round(382e9/30) ns, exactly on the grid
    end = round(382 * 1e9 / 30)
    t = align.grid(0, end, 15)
    assert len(t) == 192 and t[-1] == end


def test_a_frame_within_the_snap_after_an_instant_counts_as_at_it():
    ts = np.array([0, 1_000_500, 2_000_000, 3_002_000], np.int64)  # frame 1 is 500 ns late, frame 3 2 µs
    t = np.array([1_000_000, 3_000_000], np.int64)
    assert align.image_indices(ts, t, 10**9, snap=1_000)[0].tolist() == [1, 2]  # 2 µs late is beyond it
    assert align.image_indices(ts, t, 10**9, snap=0)[0].tolist() == [0, 2]  # exact: the frame before


def test_the_snap_keeps_an_end_a_nanosecond_short_from_padding():
    ts = np.array([0, 100, 200, 299], np.int64)
    values = np.arange(4, dtype=np.float32)[:, None]
    when = np.array([[100, 200, 300]], np.int64)
    _, exact = align.future_window(ts, values, when, end_ns=299)
    _, snapped = align.future_window(ts, values, when, end_ns=299, snap=1)
    assert exact.tolist() == [[False, False, True]] and snapped.tolist() == [[False, False, False]]
    assert align.array_ok(ts, np.array([300]), 100, snap=1).tolist() == [True]
    assert align.array_ok(ts, np.array([301]), 100, snap=1).tolist() == [False]


@pytest.mark.parametrize("fps", [3.0, 15.0, 7.0, 29.97, 10.0])
def test_a_future_window_on_steps_recorded_at_the_grid_rate_is_the_recorded_steps_bit_for_bit(fps):
    # Steps recorded at round(k·1e9/fps), as RLDS datasets give them: t_k + round(j·1e9/fps) lands
    # 1 ns beside a step at 3 and 15 Hz, and must still be that step, not an interpolation.
    n, horizon = 40, 10
    ts = np.round(np.arange(n) * (align.NS / fps)).astype(np.int64)
    values = np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32)
    t = align.grid(int(ts[0]), int(ts[-1]), fps)
    assert np.array_equal(t, ts)
    spec = PackSpec(fps=fps, max_horizon=horizon)
    future, pad = align.future_window(ts, values, spec.future_instants(int(t[0]), np.arange(len(t))), int(ts[-1]))
    for k in range(n):
        want = values[np.minimum(np.arange(k, k + horizon + 1), n - 1)]
        assert np.array_equal(future[k], want), (fps, k)
    # halfway between two steps is still interpolated
    mid = align.interpolate(ts, values, ts[:-1] + (ts[1:] - ts[:-1]) // 2)
    assert not np.array_equal(mid, values[:-1])
