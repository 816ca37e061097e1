"""Array health measured for a batch of episodes equals each episode measured alone, by the
signals' definition written plainly (a loop a column, numpy's own median): random batches of
episodes of mixed lengths, widths, dtypes, clocks, constants, spikes and non-finite values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayform.recordings import array_health, health

NS = 1_000_000_000


def _by_definition(streams):
    """The ``constant`` and ``spike`` signals of one episode, as docs/design.md defines them."""
    out = []
    groups: dict = {}
    for name, ts, values in streams:
        if values.dtype.kind != "b" and len(values) >= 2:
            groups.setdefault((len(ts), int(ts[0]), int(ts[-1])), []).append((name, ts, values))
    for members in groups.values():
        ts = members[0][1]
        n = len(ts)
        best = None  # (z, step, order of its column)
        column = 0
        for name, _, values in members:
            flat = values.reshape(n, -1).astype(np.float64)
            stuck = 0
            for k in range(flat.shape[1]):
                x = flat[:, k]
                kept = x[np.isfinite(x)]
                if not len(kept) or kept.max() - kept.min() <= 0:
                    stuck += 1
                moving = values.dtype.kind == "f" and np.isfinite(x).all() and x.max() > x.min()
                if moving and n >= array_health.WINDOW:
                    half = array_health.WINDOW // 2
                    held = np.concatenate([[x[0]] * half, x, [x[-1]] * half])
                    smooth = np.array([np.median(held[i:i + array_health.WINDOW]) for i in range(n)])
                    r = x - smooth
                    dev = np.abs(r - np.median(r))
                    scale = max(array_health.MAD_TO_STD * np.median(dev), 0.02 * (smooth.max() - smooth.min()))
                    if scale <= 0:
                        scale = dev.mean()
                    z = dev / scale if scale > 0 else np.zeros(n)
                    i = int(np.argmax(z))
                    if best is None or (z[i], -i) > (best[0], -best[1]):
                        best = (float(z[i]), i, name)
                column += 1
            if n >= 10 and stuck and flat.shape[1] > 1:
                out.append(("constant", name, float(stuck), int(ts[0]), int(ts[-1])))
        if best is not None and best[0] > 0:
            out.append(("spike", best[2], best[0], int(ts[best[1]]), int(ts[best[1]])))
    return out


@st.composite
def _episodes(draw):
    episodes = []
    for e in range(draw(st.integers(1, 6))):
        streams = []
        clocks = [draw(st.sampled_from([9, 14, 15, 16, 31, 60, 61, 100])) for _ in range(draw(st.integers(1, 2)))]
        for s in range(draw(st.integers(1, 4))):
            n = draw(st.sampled_from(clocks))
            ts = np.arange(n, dtype=np.int64) * (NS // 10) + clocks.index(n) * 7  # the second clock its own
            width = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
            dtype = draw(st.sampled_from([np.float32, np.float64, np.int32, np.bool_]))
            seed = draw(st.integers(0, 2**32 - 1))
            rng = np.random.default_rng(seed)
            values = np.cumsum(rng.normal(0, 1, (n, *width)), axis=0)
            if draw(st.booleans()):  # constant elements
                values.reshape(n, -1)[:, 0] = 0.5
            if draw(st.booleans()):  # a spike
                at = int(rng.integers(0, n))
                values.reshape(n, -1)[at:at + 3, -1] = 1e6
            if draw(st.booleans()) and dtype is not np.int32:  # a quantised, mostly flat stream (scale 0)
                values = np.where(rng.random(values.shape) < 0.9, 1.0, values)
            if dtype in (np.float32, np.float64) and draw(st.booleans()):
                values.reshape(n, -1)[int(rng.integers(0, n)), 0] = np.nan
            values = values.astype(dtype) if dtype is not np.bool_ else values > 0
            streams.append((f"e{e}/s{s}", ts, values))
        episodes.append(streams)
    return episodes


@settings(max_examples=150, deadline=None)
@given(_episodes())
def test_a_batch_measures_each_episode_as_alone_by_the_definition(episodes):
    batched = array_health.measure(episodes)
    assert len(batched) == len(episodes)
    for got, streams in zip(batched, episodes):
        want = _by_definition(streams)
        assert [s[:2] + s[3:] for s in got] == [s[:2] + s[3:] for s in want]
        assert [s[2] for s in got] == pytest.approx([s[2] for s in want], rel=1e-9)
        assert [s[:2] + s[3:] for s in got] == [s[:2] + s[3:] for s in array_health.measure([streams])[0]]


def test_a_short_episode_beside_long_ones_keeps_its_spike_and_its_constant():
    t = np.arange(40, dtype=np.int64) * NS // 10
    rng = np.random.default_rng(1)
    short = np.cumsum(rng.normal(0, 1, (40, 3)), axis=0)
    short[:, 1] = 2.0
    short[30, 0] = 1e6
    long_ = [("q", np.arange(63, dtype=np.int64) * NS // 10, np.cumsum(rng.normal(0, 1, (63, 3)), axis=0))]
    found = health.arrays_of_episodes([long_, [("q", t, short)], long_])[1]
    assert {(f.kind, f.value > 1000 if f.kind == "spike" else f.value, f.start_ns) for f in found} == {
        ("constant", 1.0, 0), ("spike", True, int(t[30]))}


@settings(max_examples=40, deadline=None)
@given(_episodes())
def test_windows_taken_a_few_rows_at_a_time_measure_the_same(episodes):
    whole = array_health.measure(episodes)
    was, array_health.WINDOWS_BYTES = array_health.WINDOWS_BYTES, 1  # one row at a time
    try:
        assert array_health.measure(episodes) == whole
    finally:
        array_health.WINDOWS_BYTES = was
