"""A pack's clock (``pack.grid``): a sample's history and future are the grid's own instants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rayform.pack import grid
from rayform.pack.spec import PackSpec
from rayform.packer import align

fps_values = st.one_of(st.sampled_from([3.0, 7.0, 15.0, 29.97, 30000 / 1001, 10.0, 1e4]),
                       st.floats(0.5, 2000, allow_nan=False, allow_infinity=False))


@settings(max_examples=200, deadline=None)
@given(fps=fps_values, start=st.integers(0, 10**15), history=st.integers(0, 12), horizon=st.integers(0, 20),
       n=st.integers(1, 80), data=st.data())
def test_history_and_future_are_the_grid_s_instants_at_the_steps_before_and_after(fps, start, history, horizon, n, data):
    spec = PackSpec(fps=fps, max_history=history, max_horizon=horizon)
    t = align.grid(start, start + int(np.round((n - 1) * grid.NS / fps)), fps)
    steps = np.array(sorted(data.draw(st.sets(st.integers(0, len(t) - 1), min_size=1))), np.int64)
    o = grid.origin(int(t[steps[0]]), int(steps[0]), fps)
    assert o == start
    every = grid.instants(start, np.arange(-history, len(t) + horizon), fps)  # the grid, before and after
    at = lambda k: every[k + history]
    back, ahead = spec.history_instants(o, steps), spec.future_instants(o, steps)
    assert back.shape == (len(steps), history) and ahead.shape == (len(steps), horizon + 1)
    for row, k in enumerate(steps):
        assert [int(x) for x in back[row]] == [int(at(k - j)) for j in range(1, history + 1)]
        assert [int(x) for x in ahead[row]] == [int(at(k + j)) for j in range(horizon + 1)]
    assert np.array_equal(every[history:history + len(t)], t)  # the grid is the same formula


def test_a_step_s_history_is_one_nanosecond_off_an_offset_from_its_own_instant_and_on_the_grid():
    # why the formula is the grid's: at 3 fps, t_2 − round(1e9/3) is 1 ns beside step 1
    spec = PackSpec(fps=3.0, max_history=1)
    t = align.grid(0, 10**9, 3.0)
    offset = t[2] - round(grid.NS / 3)
    assert offset != t[1]
    assert spec.history_instants(0, np.array([2]))[0, 0] == t[1]


def test_the_group_of_pictures_holds_the_history_its_first_sample_shows():
    spec = PackSpec(fps=15, image_codec="h264", max_history=4)
    assert spec.keyframe_every == 8 and spec.group_frames() == 12 and spec.group_frames(2) == 10
    assert PackSpec(fps=15, image_codec="h264").group_frames() == PackSpec(fps=15, image_codec="h264").clip_frames


def test_a_pack_of_the_format_before_the_grid_s_formula_still_reads_and_an_unknown_format_does_not(tmp_path):
    import rayform
    from rayform.converters.demo import DemoConfig, ingest_demo
    from rayform.errors import Malformed
    from rayform.pack import Pack
    from rayform.pack.spec import PACK_FORMAT

    client = rayform.Client(tmp_path / "store")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=1.0, image_size=16)))
    made = client.pack(s, 15, workers=1, progress=False, max_horizon=2, max_history=1)
    manifest = client.store.get_json_blob(made.digest, "the pack's manifest")
    assert manifest["format"] == PACK_FORMAT == "rayform.pack/2"
    old = Pack(made.digest, {**manifest, "format": "rayform.pack/1"})
    assert old.spec == made.spec and len(old.shards) == len(made.shards)
    with pytest.raises(Malformed, match="rayform.pack/9"):
        Pack(made.digest, {**manifest, "format": "rayform.pack/9"})
