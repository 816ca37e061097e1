"""Observation history: hand-computed values at a segment's start (padding) and in its
middle, images and arrays, through both datasets with forked workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import rayform
from rayform import ArrayStream, ImageStream
from rayform.codec import imagecodec
from rayform.errors import InvalidInput


@pytest.fixture(scope="module")
def ramp(tmp_path_factory):
    """Camera at 10 Hz, frame i all value 8·i; ``x`` at 100 Hz equal to the time in seconds."""
    client = rayform.Client(tmp_path_factory.mktemp("history") / "store")
    cam_t = np.arange(30, dtype=np.int64) * 100_000_000
    x_t = np.arange(300, dtype=np.int64) * 10_000_000
    frames = [imagecodec.encode_png(np.full((4, 6, 3), 8 * i, np.uint8)) for i in range(30)]
    ref = client.segments.add("lab", "ramp", [ImageStream("cam", cam_t, frames),
                                             ArrayStream("x", x_t, (x_t / 1e9).astype(np.float32)[:, None])])
    s = client.slices.create([ref], name="ramp")
    client.pack(s, 10, workers=1, progress=False, max_history=3, max_horizon=2)
    return s


def _by_frame(ds):
    return {int(x["meta"]["frame_index"]): x for x in (ds[i] for i in range(len(ds)))}


def test_history_at_the_start_is_padded_with_the_first_values_and_in_the_middle_is_the_past(ramp):
    ds = rayform.torch.EpisodeDataset(ramp, obs=["cam", "x"], fps=10, history={"cam": 3, "x": 4})
    at = _by_frame(ds)
    first, middle = at[0], at[5]
    assert first["cam"].shape == (3, 3, 4, 6) and first["x"].shape == (4, 1)
    assert first["cam"][:, 0, 0, 0].tolist() == [0, 0, 0] and first["cam_is_pad"].tolist() == [True, True, False]
    assert first["x"][:, 0].tolist() == [0.0] * 4 and first["x_is_pad"].tolist() == [True, True, True, False]
    assert middle["cam"][:, 0, 0, 0].tolist() == [24, 32, 40] and not middle["cam_is_pad"].any()
    assert np.allclose(middle["x"][:, 0], [0.2, 0.3, 0.4, 0.5]) and not middle["x_is_pad"].any()
    at1 = at[1]  # one step in: the oldest of three steps is before the start
    assert at1["cam"][:, 0, 0, 0].tolist() == [0, 0, 8] and at1["cam_is_pad"].tolist() == [True, False, False]


def test_delta_timestamps_in_seconds_are_the_same_steps(ramp):
    a = _by_frame(rayform.torch.EpisodeDataset(ramp, obs=["cam"], fps=10, delta_timestamps={"cam": [-0.2, 0.0]}))
    assert a[5]["cam"][:, 0, 0, 0].tolist() == [24, 40] and a[1]["cam_is_pad"].tolist() == [True, False]


@pytest.mark.parametrize("workers", [0, 2])
def test_the_streaming_dataset_gives_the_same_history_in_batches(ramp, workers):
    kw = dict(obs=["cam", "x"], action="x", fps=10, horizon=2, history={"cam": 2, "x": 3})
    mapped = _by_frame(rayform.torch.EpisodeDataset(ramp, **kw))
    ds = rayform.torch.StreamingEpisodeDataset(ramp, **kw, batch_size=4)
    seen = 0
    loader = DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context="fork" if workers else None)
    for batch in loader:
        assert batch["cam"].shape[1:] == (2, 3, 4, 6) and batch["x"].shape[1:] == (3, 1)
        for j, f in enumerate(batch["meta"]["frame_index"].tolist()):
            for key in ("cam", "cam_is_pad", "x", "x_is_pad", "action"):
                assert torch.equal(batch[key][j], mapped[f][key]), (f, key)
            seen += 1
    assert seen == len(ds)


def test_history_beyond_the_pack_or_off_the_grid_is_one_error(ramp):
    with pytest.raises(InvalidInput, match=r"history 4 steps back is beyond its pack's 3 .* --history 4"):
        rayform.torch.EpisodeDataset(ramp, obs=["cam"], fps=10, history={"cam": 5})
    with pytest.raises(InvalidInput, match="not a grid step"):
        rayform.torch.EpisodeDataset(ramp, obs=["cam"], fps=10, delta_timestamps={"cam": [-0.15, 0.0]})
    with pytest.raises(InvalidInput, match="not in obs"):
        rayform.torch.EpisodeDataset(ramp, obs=["cam"], fps=10, history={"x": 2})
    with pytest.raises(InvalidInput, match="give one of them"):
        rayform.torch.EpisodeDataset(ramp, obs=["cam"], fps=10, history={"cam": 2}, delta_timestamps={"cam": [0.0]})
