"""A pack's statistics: against numpy over the unpacked values, the same whatever the pack
processes, merged exactly for mixtures, and the normalization they drive."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import rayform
from rayform.codec import records
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import InvalidInput, Malformed
from rayform.pack.layout import LOWDIM
from rayform.pack.stats import PERCENTILES, StreamStats, merge, of_values, stats_of
from rayform.read.reader import PackReader


def _values(client, pack, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Every sample's value of ``name`` and every non-padding delta, unpacked from the shards."""
    reader = PackReader(client.store, pack, pack.members)
    now, deltas = [], []
    for _, raw in reader.raw_many(range(pack.samples)):
        a = records.loads(raw[LOWDIM])["arrays"][name]
        future, pad = records.unpack_array(a["future"]).astype(np.float64), records.unpack_array(a["pad"])
        now.append(future[0])
        with np.errstate(invalid="ignore"):  # inf − inf where a test keeps non-finite values
            deltas.append((future[1:] - future[0])[~pad[1:]])
    return np.stack(now), np.concatenate(deltas)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("stats") / "store")
    a = client.slices.create(ingest_demo(client, "a", DemoConfig(episodes=2, seconds=3, image_size=32, seed=1)), name="a")
    b = client.slices.create(ingest_demo(client, "b", DemoConfig(episodes=3, seconds=2, image_size=32, seed=2)), name="b")
    return client, client.pack(a, 15, workers=1, progress=False), client.pack(b, 15, workers=1, progress=False), a, b


def test_stats_are_numpy_s_over_the_unpacked_values(two):
    client, pack, _, _, _ = two
    for name in ("joints/position", "ee/pose"):
        now, deltas = _values(client, pack, name)
        got = pack.stats[name]
        assert got.count == len(now) == pack.samples
        for key, want in (("mean", now.mean(0)), ("std", now.std(0)), ("min", now.min(0)), ("max", now.max(0))):
            assert np.allclose(getattr(got, key), want, rtol=1e-12, atol=1e-12), (name, key)
        assert np.allclose(got.percentiles, np.percentile(now, PERCENTILES, axis=0), atol=1e-12)
    now, deltas = _values(client, pack, "joints/position")
    d = pack.stats["joints/position:delta"]
    assert d.count == len(deltas) and np.allclose(d.mean, deltas.mean(0), atol=1e-12)
    assert np.allclose(d.std, deltas.std(0), atol=1e-12) and np.allclose(d.q99, np.percentile(deltas, 99, axis=0))
    assert "ee/pose:delta" not in pack.stats  # a difference of poses is not a pose


def test_a_pack_made_before_deltas_had_keys_of_their_own_reads_them_as_deltas(two):
    _, pack, _, _, _ = two
    old = {"joints/position_delta" if k == "joints/position:delta" else k: v.to_manifest()
           for k, v in (pack.stats or {}).items()}
    read = stats_of({"stats": old}, "old pack", pack.schema)
    assert read is not None and set(read) == set(pack.stats or {})
    assert np.array_equal(read["joints/position:delta"].mean, (pack.stats or {})["joints/position:delta"].mean)
    # a recorded x_delta stays itself
    assert set(stats_of({"stats": {"x_delta": old["joints/position"]}}, "pack", {"x_delta": None, "x": None}) or {}) \
        == {"x_delta"}


def test_one_and_two_pack_processes_give_the_same_stats_bytes(two):
    client, _, _, a, _ = two
    one = client.pack(a, 15, workers=1, progress=False, force=True, samples_per_task=8)
    both = client.pack(a, 15, workers=2, progress=False, force=True, samples_per_task=8)
    assert json.dumps(one.manifest["stats"], sort_keys=True) == json.dumps(both.manifest["stats"], sort_keys=True)


def test_a_mixture_s_stats_are_those_of_the_concatenation(two):
    client, pa, pb, a, b = two
    ds = rayform.torch.EpisodeDataset([(a, 0.5), (b, 0.5)], obs=["joints/position"], fps=15)
    mixed = ds.stats["joints/position"]
    together = np.concatenate([_values(client, pa, "joints/position")[0], _values(client, pb, "joints/position")[0]])
    assert mixed["count"] == len(together)
    for key in ("mean", "std", "min", "max"):
        assert np.allclose(mixed[key], getattr(np, key)(together, axis=0), atol=1e-9), key
    for q, key in ((1, "q01"), (99, "q99")):  # from the parts' percentile grids: within a percent of rank
        rank = (together <= mixed[key]).mean(axis=0)
        assert np.all(np.abs(rank - q / 100) <= 0.02), (key, rank)


@pytest.mark.parametrize("mode", ["mean_std", "min_max", "quantile"])
def test_normalize_then_unnormalize_is_the_identity(two, mode):
    _, pack, _, a, _ = two
    kw = dict(obs=["joints/position"], action="joints/position_delta", fps=15, horizon=8)
    plain = rayform.torch.EpisodeDataset(a, **kw)
    normed = rayform.torch.EpisodeDataset(a, **kw, normalize={"joints/position": mode, "action": mode})
    x, y = plain[3], normed[3]
    s = pack.stats["joints/position"]
    if mode == "mean_std":
        assert torch.allclose(y["joints/position"], torch.tensor((x["joints/position"].numpy() - s.mean) / s.std,
                                                                 dtype=torch.float32), atol=1e-5)
    else:
        lo, hi = (s.min, s.max) if mode == "min_max" else (s.q01, s.q99)
        want = 2 * (x["joints/position"].numpy() - lo) / (hi - lo) - 1
        assert torch.allclose(y["joints/position"], torch.tensor(want, dtype=torch.float32), atol=1e-5)
    assert torch.allclose(normed.unnormalize(y["action"]), x["action"], atol=1e-5)
    assert np.allclose(normed.unnormalize(y["joints/position"].numpy(), "joints/position"), x["joints/position"], atol=1e-5)
    if mode == "min_max":
        every = torch.stack([normed[i]["joints/position"] for i in range(len(normed))])
        assert every.min() >= -1 - 1e-5 and every.max() <= 1 + 1e-5 and every.min() < -0.99


def test_the_streaming_dataset_normalizes_alike(two):
    _, _, _, a, _ = two
    kw = dict(obs=["joints/position"], action="joints/position", fps=15, horizon=4,
              normalize={"joints/position": "mean_std", "action": "quantile"})
    mapped = rayform.torch.EpisodeDataset(a, **kw)
    by_key = {(x["meta"]["segment"], int(x["t_ns"])): x for x in (mapped[i] for i in range(len(mapped)))}
    for x in rayform.torch.StreamingEpisodeDataset(a, **kw):
        y = by_key[(x["meta"]["segment"], int(x["t_ns"]))]
        assert torch.equal(x["joints/position"], y["joints/position"]) and torch.equal(x["action"], y["action"])


def test_bad_normalize_arguments_are_one_error(two):
    _, _, _, a, _ = two
    kw = dict(obs=["cam0/rgb", "joints/position"], action="joints/position_delta", fps=15)
    with pytest.raises(InvalidInput, match="normalize 'cam0/rgb': not an array of these samples"):
        rayform.torch.EpisodeDataset(a, **kw, normalize={"cam0/rgb": "mean_std"})
    with pytest.raises(InvalidInput, match="mode 'zscore', one of mean_std, min_max, quantile"):
        rayform.torch.EpisodeDataset(a, **kw, normalize={"action": "zscore"})
    with pytest.raises(InvalidInput, match="normalizes nothing"):
        rayform.torch.EpisodeDataset(a, **kw).unnormalize(np.zeros(3))


def test_merge_of_one_part_is_itself_and_hostile_stats_are_malformed():
    s = of_values(np.random.default_rng(0).normal(size=(500, 3)))
    assert merge([s]) is s
    doc = s.to_manifest()
    assert np.array_equal(StreamStats.from_manifest(doc, "x").percentiles, s.percentiles)
    for bad in ({**doc, "mean": [1.0]}, {**doc, "std": [float("nan")] * 3}, {**doc, "count": -1},
                {**doc, "shape": "3"}, {**doc, "percentiles": [[0.0] * 3]}):
        with pytest.raises(Malformed):
            StreamStats.from_manifest(bad, "stats")


def test_non_finite_values_are_refused_at_ingest_unless_allowed_then_left_out_of_the_statistics(tmp_path):
    client = rayform.Client(tmp_path / "store")
    t = np.arange(40, dtype=np.int64) * 50_000_000
    values = np.stack([np.linspace(0, 1, 40), np.linspace(5, 3, 40)], axis=1).astype(np.float32)
    values[7, 1] = np.nan
    values[20:, 0] = np.inf
    stream = rayform.ArrayStream("joints/position", t, values)
    with pytest.raises(InvalidInput, match=r"stream joints/position: row 7 \(t = 350000000 ns\) is not finite .*"
                                           r"21 of 40 rows are not\. .*--allow-nonfinite"):
        client.segments.add("lab", "nan", [stream])
    assert client.segments.list() == []
    s = client.slices.create([client.segments.add("lab", "nan", [stream], allow_nonfinite=True)], name="nan")
    pack = client.pack(s, 20, workers=1, progress=False)
    now, _ = _values(client, pack, "joints/position")
    got = pack.stats["joints/position"]
    finite = np.isfinite(now)
    assert got.nonfinite == int((~finite).sum()) > 0 and got.count == len(now)
    for e in range(2):
        kept = now[finite[:, e], e]
        assert got.mean[e] == pytest.approx(kept.mean(), abs=1e-9) and got.std[e] == pytest.approx(kept.std(), abs=1e-9)
        assert got.min[e] == kept.min() and got.max[e] == kept.max()
        assert np.all(np.isfinite(got.percentiles[:, e]))
    assert pack.manifest["stats"]["joints/position"]["nonfinite"] == got.nonfinite  # and it says so
