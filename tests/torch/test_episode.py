"""EpisodeDataset: the product page's snippet, the sample table, workers, order, auto-pack."""

from __future__ import annotations

import logging
import mmap
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

import rayform
from rayform.errors import InvalidInput, PackNotFound, StreamNotFound

OBS = ["cam0/rgb", "wrist/rgb", "joints/position"]

PRODUCT_PAGE = '''
import rayform
from torch.utils.data import DataLoader

client = rayform.Client()
slice_ = client.slices.get("slc_7c1e04aa")

dataset = rayform.torch.EpisodeDataset(
    slice_,
    obs=["cam0/rgb", "wrist/rgb", "joints/position"],
    action="joints/position_delta",
    fps=15,
    horizon=16,            # action chunk length
    frame="ros",
)
loader = DataLoader(dataset, batch_size=64, num_workers=8, shuffle=True, persistent_workers=True)
'''


@pytest.fixture
def packed(demo_client):
    client, s = demo_client
    client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    return client, s


def _dataset(s, **kw):
    return rayform.torch.EpisodeDataset(s, obs=OBS, action="joints/position_delta", fps=15, horizon=16, frame="ros", **kw)


def test_the_product_page_snippet_runs_as_written(packed):
    client, s = packed
    code = PRODUCT_PAGE.replace("slc_7c1e04aa", s.id) + textwrap.dedent('''
        batch = next(iter(loader))
        assert batch["cam0/rgb"].shape == (64, 3, 64, 64) and batch["cam0/rgb"].dtype.is_floating_point is False
        assert batch["action"].shape == (64, 16, 8)
        print("ok", len(dataset))
    ''')
    env = {"RAYFORM_STORE": str(client.store.root), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["ok", str(client.packs.find(s, 15).samples)]


def test_every_key_shape_and_dtype_of_the_table(packed):
    _, s = packed
    x = _dataset(s)[0]
    assert x["cam0/rgb"].shape == (3, 64, 64) and x["cam0/rgb"].dtype == torch.uint8
    assert x["wrist/rgb"].shape == (3, 64, 64) and x["wrist/rgb"].dtype == torch.uint8
    assert x["joints/position"].shape == (8,) and x["joints/position"].dtype == torch.float32
    assert x["action"].shape == (16, 8) and x["action"].dtype == torch.float32
    assert x["action_is_pad"].shape == (16,) and x["action_is_pad"].dtype == torch.bool
    assert x["t_ns"].shape == () and x["t_ns"].dtype == torch.int64
    assert {"slice", "segment", "segment_version", "site"} <= set(x["meta"]) and x["meta"]["slice"] == s.id
    assert set(x["meta"]) - {"slice", "segment", "segment_version", "site"} == {"task", "episode_index", "frame_index"}


def test_a_batch_is_the_stack_of_its_samples(packed):
    _, s = packed
    ds = _dataset(s)
    loader = DataLoader(ds, batch_size=10, shuffle=False)
    batch = next(iter(loader))
    manual = default_collate([dict(ds[i]) for i in range(10)])
    for key in ["cam0/rgb", "wrist/rgb", "joints/position", "action", "action_is_pad", "t_ns"]:
        assert batch[key].shape == manual[key].shape and torch.equal(batch[key], manual[key]), key
    assert batch["cam0/rgb"].is_contiguous(memory_format=torch.channels_last)
    assert batch["meta"]["segment"] == manual["meta"]["segment"]


def test_a_transform_that_replaces_values_is_collated_the_ordinary_way(packed):
    _, s = packed

    def transform(x):
        x["cam0/rgb"] = x["cam0/rgb"].float() / 255
        return x

    ds = _dataset(s, transform=transform)
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch["cam0/rgb"].dtype == torch.float32 and batch["cam0/rgb"].shape == (4, 3, 64, 64)
    assert torch.equal(batch["wrist/rgb"][2], ds[2]["wrist/rgb"])


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_cover_every_sample_once_per_epoch(packed, context):
    _, s = packed
    ds = _dataset(s)
    loader = DataLoader(ds, batch_size=16, num_workers=2, shuffle=True, persistent_workers=True,
                        multiprocessing_context=context, generator=torch.Generator().manual_seed(0))
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        keys = [(seg, int(t)) for b in loader for seg, t in zip(b["meta"]["segment"], b["t_ns"])]
        assert len(keys) == len(set(keys)) == len(ds)
        orders.append(keys)
    assert orders[0] != orders[1]


def test_set_epoch_reaches_persistent_workers(packed):
    _, s = packed
    ds = _dataset(s)
    loader = DataLoader(ds, batch_size=len(ds), num_workers=1, shuffle=False, persistent_workers=True)
    ds.set_epoch(0)
    first = next(iter(loader))["t_ns"]
    ds.set_epoch(1)
    second = next(iter(loader))["t_ns"]
    expected = torch.stack([ds[i]["t_ns"] for i in range(len(ds))])
    assert torch.equal(second, expected) and not torch.equal(first, second)


ORDER = '''
import sys, torch, rayform
from torch.utils.data import DataLoader
c = rayform.Client(sys.argv[1]); s = c.slices.get(sys.argv[2])
ds = rayform.torch.EpisodeDataset(s, obs=["joints/position"], action="joints/position_delta", fps=15, seed=int(sys.argv[3]))
ds.set_epoch(int(sys.argv[4]))
sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True)
print([int(b["t_ns"][i]) for b in DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2) for i in range(len(b["t_ns"]))])
'''


def test_same_slice_seed_and_epoch_give_the_same_order_in_a_new_process(packed):
    client, s = packed

    def order(seed, epoch):
        r = subprocess.run([sys.executable, "-c", ORDER, str(client.store.root), s.id, str(seed), str(epoch)],
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr
        return eval(r.stdout)

    a = order(0, 3)
    assert a == order(0, 3)
    assert a != order(0, 4) and a != order(1, 3)
    assert sorted(a) == sorted(order(0, 4))


def test_errors_come_at_construction(packed):
    _, s = packed
    with pytest.raises(StreamNotFound, match="no stream 'depth'"):
        rayform.torch.EpisodeDataset(s, obs=["depth"], fps=15)
    with pytest.raises(InvalidInput, match="image stream"):
        rayform.torch.EpisodeDataset(s, obs=["cam0/rgb"], action="wrist/rgb", fps=15)
    with pytest.raises(InvalidInput, match="frame"):
        rayform.torch.EpisodeDataset(s, obs=["cam0/rgb"], fps=15, frame="enu")


def test_a_missing_pack_is_made_once_by_a_single_process(demo_client, caplog):
    client, s = demo_client
    with caplog.at_level(logging.WARNING, logger="rayform"):
        ds = _dataset(s)
    assert [r.getMessage() for r in caplog.records if "packing it now" in r.getMessage()] != []
    assert len(client.packs.list(s)) == 1 and len(ds) == client.packs.list(s)[0].samples
    _dataset(s)  # found, not made again
    assert len(client.packs.list(s)) == 1


def test_a_typo_is_said_before_anything_is_packed(demo_client, caplog):
    client, s = demo_client
    with caplog.at_level(logging.INFO, logger="rayform"), pytest.raises(StreamNotFound, match="no stream 'cam0/rbg'"):
        rayform.torch.EpisodeDataset(s, obs=["cam0/rbg"], fps=15)
    assert "packing it now" not in caplog.text and client.packs.list(s) == []


def test_a_misspelt_stream_beside_a_pack_names_the_real_one_not_a_repack(packed):
    """A pack at that fps exists: a typo must not be offered as a stream to pack, and the error
    comes out of the constructor with the caller's line on top, not rayform's insides."""
    _, s = packed
    with pytest.raises(StreamNotFound) as info:
        rayform.torch.EpisodeDataset(s, obs=["cam0/rgb", "joints/positon"], action="joints/position_delta", fps=15)
    message = str(info.value)
    assert "no stream 'joints/positon' in the slice. Did you mean 'joints/position'?" in message
    assert "--streams" not in message and "rayform pack" not in message
    frames = traceback.extract_tb(info.value.__traceback__)
    assert len(frames) <= 2 and frames[0].name.startswith("test_"), frames  # this line, then the entry point
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_horizon_beyond_the_packs_is_an_error_not_a_second_pack(demo_client):
    client, s = demo_client
    client.pack(s, 15, workers=1, progress=False, max_horizon=8)
    with pytest.raises(InvalidInput, match=f"horizon 16 is beyond the pack's maximum 8 at 15 fps. "
                                           f"Run: rayform pack {s.id} --fps 15 --horizon 16"):
        rayform.torch.StreamingEpisodeDataset(s, obs=["joints/position"], action="joints/position_delta", fps=15)
    client.pack(s, 10, workers=1, progress=False, streams=["joints/position"])
    with pytest.raises(StreamNotFound, match="no stream 'cam0/rgb' in its pack fps10-[0-9a-f]{8} at 10 fps.*"
                                             "--streams joints/position,cam0/rgb"):
        rayform.torch.EpisodeDataset(s, obs=["cam0/rgb"], fps=10)
    assert len(client.packs.list(s)) == 2  # nothing packed behind the user's back


def test_a_missing_pack_on_a_read_only_store_names_the_command(demo_client, monkeypatch):
    client, s = demo_client
    import rayform.torch.pack_choice as packsource

    monkeypatch.setattr(packsource, "_writable", lambda store: False)
    with pytest.raises(PackNotFound, match=f"rayform pack {s.id} --fps 15"):
        _dataset(s)


def test_memory_maps_not_copies(packed):
    _, s = packed
    ds = _dataset(s)
    ds[0]
    index = ds.readers[0].index
    assert not index.flags.owndata and not index.flags.writeable  # a view of the mapped file, not a copy
    base = index
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def test_a_batch_without_a_transform_makes_no_sample_dict_per_row(packed):
    """The default collate returns the batch buffer itself: of a built batch, only the sample
    the collate looks at first is made (a dict of tensors per row was ~10 µs a sample)."""
    _, s = packed
    ds = _dataset(s)
    built = ds.__getitems__(list(range(12)))
    batch = default_collate(built)
    assert sum(made is not None for made in built._made) == 1
    assert batch["cam0/rgb"].data_ptr() == built.buf.tensors["cam0/rgb"].data_ptr()
    assert batch["cam0/rgb"].data_ptr() % 32 == 16  # batch.IMAGE_SKEW: the decoder writes such rows faster
    manual = default_collate([dict(ds[i]) for i in range(12)])
    for key in ["cam0/rgb", "wrist/rgb", "joints/position", "action", "action_is_pad", "t_ns"]:
        assert torch.equal(batch[key], manual[key]), key
    assert batch["meta"]["frame_index"].tolist() == manual["meta"]["frame_index"].tolist()


def test_a_sample_a_collate_fn_changed_is_collated_as_changed(packed):
    """A collate_fn of the user's may change samples of a built batch before the default
    collate: the batch then holds the change, not the buffer's rows."""
    _, s = packed
    ds = _dataset(s)
    original = default_collate(ds.__getitems__(list(range(6))))

    def collate(samples):
        samples[2]["joints/position"] = torch.full((8,), 7.0)
        samples[4]["meta"]["site"] = "elsewhere"
        return default_collate(samples)

    batch = next(iter(DataLoader(ds, batch_size=6, collate_fn=collate)))
    assert torch.equal(batch["joints/position"][2], torch.full((8,), 7.0))
    assert torch.equal(batch["joints/position"][[0, 1, 3, 4, 5]], original["joints/position"][[0, 1, 3, 4, 5]])
    assert batch["meta"]["site"][4] == "elsewhere" and batch["meta"]["site"][3] == original["meta"]["site"][3]
    assert torch.equal(batch["cam0/rgb"], original["cam0/rgb"])


def test_a_collate_fn_may_sort_and_drop_the_samples_it_is_given(packed):
    """A ``collate_fn`` gets a list: sorting it, or dropping a sample, works as on a list, and
    the batch holds the samples in the order left."""
    _, s = packed
    ds = _dataset(s)

    def collate(samples):
        samples.sort(key=lambda x: -int(x["t_ns"]) - 10**12 * x["meta"]["episode_index"])
        del samples[0]
        return default_collate(samples)

    batch = next(iter(DataLoader(ds, batch_size=8, collate_fn=collate)))
    kept = sorted((dict(ds[i]) for i in range(8)), key=lambda x: -int(x["t_ns"]) - 10**12 * x["meta"]["episode_index"])[1:]
    manual = default_collate(kept)
    for key in ["cam0/rgb", "joints/position", "action", "t_ns"]:
        assert torch.equal(batch[key], manual[key]), key
    assert batch["t_ns"].shape == (7,)
