"""``ClipBatchSampler``: the clip-aware order in a plain ``DataLoader(dataset, batch_sampler=…)``:
the batches ``EpisodeDataset(batch_size=…)`` makes, each clip decoded about once, as mixed as
uniform sampling, every sample once an epoch in every rank's share."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import rayform
from rayform.diagnostics.batch_mixing import mixing
from rayform.errors import InvalidInput
from rayform.torch import ClipBatchSampler

KW = dict(obs=["cam/rgb"], action="joints", fps=30, horizon=2)


def _ids(batch) -> list[tuple[int, int]]:
    return list(zip(batch["meta"]["episode_index"].tolist(), batch["meta"]["frame_index"].tolist()))


def test_a_plain_dataloader_reads_the_clip_aware_batches_through_forked_workers(one_shard):
    s, packs = one_shard
    ds = rayform.torch.EpisodeDataset(s, **KW, pack=packs["h264"].key)
    sampler = ClipBatchSampler(ds, 16, num_workers=2)
    batches = [_ids(b) for b in DataLoader(ds, batch_sampler=sampler, num_workers=2)]
    ids = [i for b in batches for i in b]
    assert len(ids) == len(set(ids)) == len(ds) and len(batches) == len(sampler)
    # the very batches of the dataset given its batch size (the same stride: 2 workers)
    ref = rayform.torch.EpisodeDataset(s, **KW, pack=packs["h264"].key, batch_size=16, clip_stride=2)
    assert batches == [_ids(b) for b in DataLoader(ref, batch_size=16, num_workers=2)]
    assert mixing([[e for e, _ in b] for b in batches], 24).ratio >= 0.9
    sampler.set_epoch(1)
    again = [_ids(b) for b in DataLoader(ds, batch_sampler=sampler, num_workers=2)]
    assert sorted(i for b in again for i in b) == sorted(ids) and again != batches


def test_each_clip_is_decoded_about_once_where_shuffled_indices_decode_it_again_and_again(one_shard):
    s, packs = one_shard
    ds = rayform.torch.EpisodeDataset(s, **KW, pack=packs["h264"].key)
    for _ in DataLoader(ds, batch_sampler=ClipBatchSampler(ds, 32)):
        pass
    clips = ds.builders[0].clips
    shuffled = rayform.torch.EpisodeDataset(s, **KW, pack=packs["h264"].key)
    for _ in DataLoader(shuffled, batch_size=32, shuffle=True):
        pass
    other = shuffled.builders[0].clips
    assert clips.built == len(ds) and clips.decoded / clips.built <= 1.3
    assert other.decoded / other.built >= 2 * clips.decoded / clips.built


class _Sized:
    """What the sampler takes of a dataset: its length, its stride, the order it sets."""

    def __init__(self, n: int):
        self.n, self.clip_stride, self.ordered = n, 2, None

    def __len__(self) -> int:
        return self.n

    def order_in_batches(self, batch_size: int, clip_stride: int) -> None:
        self.ordered = (batch_size, clip_stride)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 500), b=st.integers(1, 40), world=st.integers(1, 6), workers=st.integers(0, 6),
       drop_last=st.booleans())
def test_every_rank_gets_as_many_batches_and_together_every_batch(n, b, world, workers, drop_last):
    """The ranks' shares (a property over sizes, world sizes and workers): equal in length (a
    rank that ran out would hang DDP), together every batch of the epoch (every whole one with
    drop_last, then each once), each rank's batches those its readers keep whole clips of: a
    stride that is a multiple of the world's readers (where that fits in the bound)."""
    ds = _Sized(n)
    shares = [list(ClipBatchSampler(ds, b, num_workers=workers, drop_last=drop_last, num_replicas=world, rank=rank))
              for rank in range(world)]
    batch_size, stride = ds.ordered
    readers = world * max(1, workers)
    assert batch_size == b and stride >= 1 and (stride % readers == 0 or readers > 64)
    whole, rest = divmod(n, b)
    epoch = [tuple(range(k * b, min(n, (k + 1) * b))) for k in range(whole + (0 if drop_last or not rest else 1))]
    assert len({len(share) for share in shares}) == 1
    seen = [tuple(batch) for share in shares for batch in share]
    if drop_last:
        assert len(seen) == len(set(seen)) == (len(epoch) // world) * world and set(seen) <= set(epoch)
    else:
        assert set(seen) == set(epoch) and len(seen) - len(epoch) < world  # a wrap pads less than a turn
    for rank, share in enumerate(shares):  # rank r: the batches r, r + W, …
        assert all(batch[0] // b % world == rank for batch in share[: len(epoch) // world])


def test_what_it_refuses(one_shard):
    s, packs = one_shard
    ds = rayform.torch.EpisodeDataset(s, **KW, pack=packs["h264"].key)
    for kw, message in [(dict(batch_size=0), "batch_size 0"), (dict(batch_size=8, num_workers=-1), "num_workers -1"),
                        (dict(batch_size=8, num_replicas=2, rank=2), "rank 2 of 2")]:
        with pytest.raises(InvalidInput, match=message):
            ClipBatchSampler(ds, **kw)
