"""Images decoded at the size a dataset asks (resize=): through the JPEG decoder's DCT
scaling, matching a full decode resized, in both datasets and with history."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import rayform
from rayform.codec import imagecodec
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import InvalidInput
from rayform.sample.builder import decode_image


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB: ~30+ for two good resamplings of one picture, ~10 for
    unrelated ones."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10 * np.log10(255**2 / max(mse, 1e-9))


@pytest.fixture(scope="module")
def slice_(tmp_path_factory):
    c = rayform.Client(tmp_path_factory.mktemp("resize") / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=2, seconds=2.0, image_size=64)), name="r")
    c.pack(s, 10, workers=1, progress=False, max_history=1)
    return s


def test_a_jpeg_decoded_at_half_size_is_the_full_decode_resized():
    rng = np.random.default_rng(0)
    smooth = np.kron(rng.integers(0, 255, (12, 16, 3)), np.ones((20, 20, 1))).astype(np.uint8)  # 240x320
    data = imagecodec.encode_jpeg(smooth, 95)
    half = imagecodec.decode_resized(data, "jpeg", (120, 160))
    reference = imagecodec.resize(imagecodec.decode_jpeg(data), (120, 160))
    assert half.shape == (120, 160, 3) and psnr(half, reference) > 25 and psnr(half, reference[::-1]) < 15
    out = np.empty((100, 150, 3), np.uint8)
    odd = decode_image(data, "jpg", out, (240, 320, 3), "odd size", resize=(100, 150))
    assert odd is out and odd.shape == (100, 150, 3)
    png = imagecodec.decode_resized(imagecodec.encode_png(smooth), "png", (60, 80))
    np.testing.assert_array_equal(png, imagecodec.resize(smooth, (60, 80)))


def test_both_datasets_give_the_resized_images_and_the_same_values_otherwise(slice_):
    kw = dict(obs=["cam0/rgb", "wrist/rgb", "joints/position"], action="joints/position_delta", fps=10,
              history={"cam0/rgb": 2})
    full = rayform.torch.EpisodeDataset(slice_, **kw)
    small = rayform.torch.EpisodeDataset(slice_, **kw, resize=(32, 32))
    a, b = full[3], small[3]
    assert b["cam0/rgb"].shape == (2, 3, 32, 32) and b["wrist/rgb"].shape == (3, 32, 32)
    for key in ("joints/position", "action", "t_ns", "cam0/rgb_is_pad"):
        assert torch.equal(a[key], b[key])
    expect = imagecodec.resize(np.ascontiguousarray(a["wrist/rgb"].permute(1, 2, 0).numpy()), (32, 32))
    got = b["wrist/rgb"].permute(1, 2, 0).numpy()
    assert psnr(got, expect) > 25 and psnr(got, expect[:, ::-1]) < psnr(got, expect) - 8
    batch = next(iter(DataLoader(small, batch_size=4, num_workers=2, multiprocessing_context="fork")))
    assert batch["cam0/rgb"].shape == (4, 2, 3, 32, 32)
    for j in range(4):
        assert torch.equal(batch["wrist/rgb"][j], small[j]["wrist/rgb"])
    streamed = rayform.torch.StreamingEpisodeDataset(slice_, **kw, resize=(32, 32), batch_size=4)
    sb = next(iter(DataLoader(streamed, batch_size=None)))
    assert sb["cam0/rgb"].shape == (4, 2, 3, 32, 32) and sb["wrist/rgb"].shape == (4, 3, 32, 32)


@pytest.mark.parametrize("bad", [(0, 32), (32,), "32x32", (32.0, 32), (True, 32)])
def test_a_bad_size_is_one_error_at_construction(slice_, bad):
    with pytest.raises(InvalidInput, match="resize"):
        rayform.torch.EpisodeDataset(slice_, obs=["cam0/rgb"], fps=10, resize=bad)
