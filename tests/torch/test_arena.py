"""Recycled batch memory (rayform.torch.arena) through real forked DataLoader workers: a
batch, or any view of it, that the consumer holds is never overwritten; one kept small
tensor does not hold the images; a transform's batches come out right."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.utils.data import DataLoader

import rayform
import rayform.torch.arena as arena
from rayform import config
from rayform.converters.demo import DemoConfig, ingest_demo

KEYS = ("cam0/rgb", "wrist/rgb", "joints/position", "action", "t_ns")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    c = rayform.Client(tmp_path_factory.mktemp("arena") / "store")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=2, seconds=4.0, image_size=32)), name="a")
    c.pack(s, 15, workers=1, progress=False)
    return rayform.torch.EpisodeDataset(s, obs=["cam0/rgb", "wrist/rgb", "joints/position"],
                                        action="joints/position_delta", fps=15)


def _loader(ds, **kw):
    return DataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context="fork", **kw)


def _copies(batches):
    return [{k: b[k].clone() for k in KEYS} for b in batches]


def _equal(a, b):
    return all(torch.equal(a[k], b[k]) for k in KEYS)


def test_batches_held_by_the_consumer_are_never_overwritten(dataset):
    reference = _copies(DataLoader(dataset, batch_size=8, num_workers=0))
    held = list(_loader(dataset))  # more batches than slots: the rest get fresh memory
    assert len(held) > config.BATCH_SLOTS * 2
    assert all(_equal(h, r) for h, r in zip(held, reference))
    for _ in range(2):  # later epochs reuse whatever is free, and nothing that is held
        for b in _loader(dataset, persistent_workers=False):
            assert b["cam0/rgb"].shape[1:] == (3, 32, 32)
    assert all(_equal(h, r) for h, r in zip(held, reference))


def test_a_held_view_keeps_its_slot_and_its_pixels(dataset):
    reference = _copies(DataLoader(dataset, batch_size=8, num_workers=0))
    views = [b["wrist/rgb"][1:3, :, 4:20] for b in _loader(dataset, persistent_workers=True)]
    for _ in range(3):
        for _b in _loader(dataset):
            pass
    for v, r in zip(views, reference):
        assert torch.equal(v, r["wrist/rgb"][1:3, :, 4:20])


def test_keeping_a_small_tensor_of_every_batch_lets_the_images_go(dataset):
    gc.collect()
    kept = []
    loader = _loader(dataset, persistent_workers=True)
    for b in loader:
        kept.append(b["t_ns"])
        assert any(o.leases for o in arena._opened.values())  # this batch's images are in a slot
        del b
    gc.collect()
    assert sum(o.leases for o in arena._opened.values()) == 0  # every slot given back
    reference = [b["t_ns"] for b in DataLoader(dataset, batch_size=8, num_workers=0)]
    assert all(torch.equal(k, r) for k, r in zip(kept, reference))


def _transformed(dataset, transform):
    """(the batches with ``transform``, through forked workers; the batches without it, in process)."""
    reference = _copies(DataLoader(dataset, batch_size=8, num_workers=0))
    dataset.transform = transform
    try:
        return list(_loader(dataset)), reference
    finally:
        dataset.transform = None


def test_a_transform_that_replaces_an_image_gets_its_own_memory(dataset):
    def flip(sample):
        sample["cam0/rgb"] = sample["cam0/rgb"].flip(-1)
        return sample

    held, reference = _transformed(dataset, flip)
    for h, r in zip(held, reference):
        assert torch.equal(h["cam0/rgb"], r["cam0/rgb"].flip(-1)) and torch.equal(h["wrist/rgb"], r["wrist/rgb"])


def test_a_transform_that_narrows_an_image_to_a_view_of_its_row_is_collated_as_it_returned(dataset):
    """A strided view of a sample's row starts where the row does: the batch must still be the
    transform's images, not the buffer's rows."""
    def every_other_column(sample):
        sample["cam0/rgb"] = sample["cam0/rgb"][:, :, ::2]
        return sample

    held, reference = _transformed(dataset, every_other_column)
    for h, r in zip(held, reference):
        assert h["cam0/rgb"].shape[1:] == (3, 32, 16)
        assert torch.equal(h["cam0/rgb"], r["cam0/rgb"][:, :, :, ::2]) and torch.equal(h["wrist/rgb"], r["wrist/rgb"])


def test_a_shipped_batch_moves_no_tensor_to_shared_memory(dataset, monkeypatch):
    """Images cross as their slot's number, everything else (``meta``'s collated ints too) by
    value: a tensor pickled for another process would be moved to shared memory and its file
    descriptor passed over a socket, costing both processes more than its bytes."""
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # registers torch's reducers with ForkingPickler
    from torch.utils.data import default_collate

    import rayform.torch.batch as batch_module

    shared = []
    reducers = ForkingPickler._extra_reducers
    original = reducers[torch.UntypedStorage]
    monkeypatch.setitem(reducers, torch.UntypedStorage, lambda st: shared.append(st.nbytes()) or original(st))
    monkeypatch.setattr(batch_module, "get_worker_info", lambda: object())  # as in a DataLoader worker
    batch = default_collate(dataset.__getitems__(list(range(8))))
    assert isinstance(batch, batch_module.Shipped) and isinstance(batch["meta"]["frame_index"], torch.Tensor)
    ForkingPickler(io.BytesIO(), pickle.HIGHEST_PROTOCOL).dump(batch)
    taken = batch.buf.taken
    taken.arena.state[taken.slot] = 0  # no consumer here to give the slot back
    assert shared == []


def test_a_worker_without_shared_memory_for_slots_still_delivers(dataset, monkeypatch):
    monkeypatch.setenv("RAYFORM_BATCH_SLOTS", "0")
    monkeypatch.setattr(arena, "_arena", None)
    reference = _copies(DataLoader(dataset, batch_size=8, num_workers=0))
    assert all(_equal(h, r) for h, r in zip(_loader(dataset), reference))


def test_streamed_batches_held_by_the_consumer_are_never_overwritten(dataset):
    """The streaming dataset's own batches (DataLoader(batch_size=None) copies each mapping in
    the worker; the copy must still ship, not be unpickled there)."""
    slice_ = dataset.parts.slices[0]
    kw = dict(obs=["cam0/rgb", "wrist/rgb", "joints/position"], action="joints/position_delta", fps=15,
              batch_size=4, shuffle=rayform.torch.ShuffleConfig(window=0))
    reference = _copies(DataLoader(rayform.torch.StreamingEpisodeDataset(slice_, **kw), batch_size=None))
    held = list(DataLoader(rayform.torch.StreamingEpisodeDataset(slice_, **kw), batch_size=None, num_workers=2,
                           multiprocessing_context="fork"))
    assert len(held) == len(reference) > config.BATCH_SLOTS * 2
    key = lambda b: int(b["t_ns"][0])  # workers interleave their batches
    assert all(_equal(h, r) for h, r in zip(sorted(held, key=key), sorted(reference, key=key)))
