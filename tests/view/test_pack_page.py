"""The slice and pack pages' data: packs as `rayform show` describes them, statistics as the
pack keeps them, and samples as the datasets build them (JPEG and video packs)."""

from __future__ import annotations

import numpy as np
import pytest

from rayform.codec import imagecodec
from rayform.errors import InvalidInput, NotFound
from rayform.pack.packs import packs_described
from rayform.read.reader import PackReader
from rayform.sample.builder import SampleBuilder
from rayform.sample.spec import SampleSpec
from rayform.view.pack_page import PackPages


def test_slice_and_pack_pages_describe_the_packs(packed_small):
    client, s = packed_small
    pages = PackPages(client.store, client.segments)
    assert [x["id"] for x in pages.slice_list()] == [s.id]
    page = pages.slice_page("small")  # by name, as by id
    assert page["id"] == s.id and page["segments_total"] == len(s.segments)
    described = packs_described(client.packs, s)
    assert [(p["key"], p["default"]) for p in page["packs"]] == [(p.key, d) for p, _, d, _ in described]
    pack = described[0][0]
    info = pages.pack_page(s.id, pack.key)
    assert info["samples"] == pack.samples and info["bytes"] == sum(sh.bytes for sh in pack.shards)
    assert pack.stats is not None and set(info["stats"]) == set(pack.stats)
    st = pack.stats["joints/position"]
    assert info["stats"]["joints/position"]["mean"] == pytest.approx(st.mean.ravel().tolist())
    assert np.allclose(info["stats"]["joints/position"]["percentiles"], st.percentiles.reshape(len(st.percentiles), -1))
    with pytest.raises(NotFound):
        pages.pack_page(s.id, "fps99-00000000")


def _reference(client, pack, index, stream):
    action = stream if pack.schema[stream].kind != "image" else None
    builder = SampleBuilder(pack, SampleSpec.of(obs=[stream], action=action, fps=pack.fps, horizon=pack.spec.max_horizon))
    key, raw = PackReader(client.store, pack, builder.members).raw(index)
    return builder.build(raw, key)


def test_a_sample_is_what_the_dataset_builds(packed_small):
    client, s = packed_small
    pack = client.packs.list(s)[0]
    pages = PackPages(client.store, client.segments)
    index = pack.samples // 2
    sample = pages.sample(s.id, pack.key, index)
    ref = _reference(client, pack, index, "joints/position")
    arrays = sample["arrays"]["joints/position"]
    assert np.allclose(arrays["chunk"], ref["action"]) and arrays["is_pad"] == ref["action_is_pad"].tolist()
    assert np.allclose(arrays["now"], ref["joints/position"])
    assert sample["meta"]["segment"] == ref["meta"]["segment"]
    # the recording drawn beside the chunk covers its times up to the recording's end; the steps
    # past that end are the padded ones
    assert arrays["recorded_t"][0] <= sample["t_s"]
    ended = arrays["recorded_t"][-1]
    assert ended >= arrays["chunk_t"][-1] - 0.05 or any(arrays["is_pad"])
    snap = pack.spec.snap * float(np.median(np.diff(arrays["recorded_t"])))  # within it, the last value is read
    assert all(pad == (t > ended + snap) for t, pad in zip(arrays["chunk_t"], arrays["is_pad"]))
    assert sorted(sample["images"]) == sorted(n for n, sc in pack.schema.items() if sc.kind == "image")
    image = imagecodec.decode(pages.sample_image(s.id, pack.key, index, "cam0/rgb"), "jpeg")
    ref_image = _reference(client, pack, index, "cam0/rgb")["cam0/rgb"].transpose(1, 2, 0)
    assert image.shape == ref_image.shape and np.abs(image.astype(int) - ref_image).mean() < 4
    with pytest.raises(InvalidInput):
        pages.sample(s.id, pack.key, pack.samples)
    with pytest.raises(NotFound):
        pages.sample_image(s.id, pack.key, 0, "joints/position")


def test_a_video_packs_sample_decodes_its_clip(video_packs):
    client, s, _, h264 = video_packs
    pages = PackPages(client.store, client.segments)
    info = pages.pack_page(s.id, h264.key)
    assert info["video"]["cam/rgb"]["codec"] == "h264"
    sample = pages.sample(s.id, h264.key, 5)
    ref = _reference(client, h264, 5, "joints")
    assert np.allclose(sample["arrays"]["joints"]["chunk"], ref["action"])
    image = imagecodec.decode(pages.sample_image(s.id, h264.key, 5, "cam/rgb"), "jpeg")
    ref_image = _reference(client, h264, 5, "cam/rgb")["cam/rgb"].transpose(1, 2, 0)
    assert np.abs(image.astype(int) - ref_image).mean() < 4
