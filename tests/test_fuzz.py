"""A seeded mutator over everything a store hands over, read through both datasets and the
library: whatever the bytes, the only exceptions are rayform's. Bounded by count, not time."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import segment_manifest

import rayform
from hostile import forge_pack
from rayform.codec import records
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import RayformError
from rayform.pack.manifest import Pack
from rayform.read.reader import PackReader, _check_rows, _map_index
from rayform.sample.builder import SampleBuilder
from rayform.sample.spec import SampleSpec

SEED = 20261203
HOSTILE_VALUES = [None, True, -1, 0, 2**63, 1e308, float("nan"), "", "../../x", "/etc/passwd", "A" * 64,
                  "0" * 64, [], {}, [[]], {"a": None}, "slc_00000000", "seg_000000000000", "O", [1 << 40] * 3]


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        how = rng.random()
        if how < 0.5 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif how < 0.7 and data:
            del data[rng.randrange(len(data)):]
        elif how < 0.85:
            data[rng.randrange(len(data) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif data:
            i = rng.randrange(len(data))
            data[i:i + 4] = (0xFFFFFFFF).to_bytes(4, "little")
    return bytes(data)


DEEP = "\0deep\0"  # a leaf _mutate_doc can put in, replaced by deep nesting once written


def _mutate_doc(doc, rng: random.Random, leaf=None):
    """A JSON-like document with one leaf (or subtree) replaced by a hostile value (or ``leaf``)."""
    if isinstance(doc, dict) and doc and rng.random() < 0.8:
        key = rng.choice(sorted(doc, key=str))
        return {**doc, key: _mutate_doc(doc[key], rng, leaf)}
    if isinstance(doc, list) and doc and rng.random() < 0.8:
        i = rng.randrange(len(doc))
        return doc[:i] + [_mutate_doc(doc[i], rng, leaf)] + doc[i + 1:]
    return rng.choice(HOSTILE_VALUES) if leaf is None else leaf


def _only_ours(fn, *args) -> None:
    try:
        fn(*args)
    except RayformError:
        pass


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("fuzz") / "store")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=2, seconds=2.0, seed=5, image_size=32),
                                         progress=False), name="fuzz")
    return client, s, client.pack(s, 15, workers=1, progress=False)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy parsing a mutated npy header
def test_records_and_npy_headers(packed):
    client, s, pack = packed
    reader = PackReader(client.store, pack, pack.members)
    spec = SampleSpec.of(("cam0/rgb", "joints/position"), "joints/position_delta", horizon=8, frame="optical")
    builder = SampleBuilder(pack, spec)
    rng = random.Random(SEED)
    key, raw = reader.raw(0)
    npy = records.to_npy(np.arange(12.0).reshape(3, 4))
    for _ in range(600):
        sample = {k: bytes(v) for k, v in raw.items()}
        member = rng.choice(sorted(sample))
        sample[member] = _mutate_bytes(sample[member], rng)
        _only_ours(builder.build, sample, key)
        _only_ours(records.from_npy, _mutate_bytes(npy, rng))
        low = records.loads(bytes(raw["lowdim.mp"]))
        sample["lowdim.mp"] = records.dumps(_mutate_doc(low, rng))
        _only_ours(builder.build, sample, key)


def test_refs_and_manifests(packed, tmp_path):
    client, s, pack = packed
    rng = random.Random(SEED + 1)
    manifests = {"slice": s.manifest(), "pack": pack.manifest,
                 "segment": segment_manifest(client, s.segments[0])}
    for n in range(300):
        kind = rng.choice(sorted(manifests))
        doc = _mutate_doc(manifests[kind], rng)
        if kind == "pack":
            _only_ours(Pack, "0" * 64, doc)
            continue
        digest = client.store.put_json_blob(doc)
        if kind == "slice":
            sid = f"slc_{n:08x}"
            client.store.put_ref(f"refs/slices/{sid}.json", _mutate_doc({"id": sid, "manifest": digest}, rng)
                                 if rng.random() < 0.3 else {"id": sid, "manifest": digest})
            _only_ours(client.slices.get, sid)
        else:
            _only_ours(client.segments.get, doc.get("id", "seg_x") if isinstance(doc, dict) and isinstance(
                doc.get("id"), str) else "seg_000000000000", digest)
    raw = json.dumps(pack.manifest).encode()
    for _ in range(300):
        try:
            doc = json.loads(_mutate_bytes(raw, rng))
        except ValueError:
            continue
        _only_ours(Pack, "0" * 64, doc)


def test_indexes(packed, tmp_path):
    client, s, pack = packed
    reader = PackReader(client.store, pack, pack.members)
    good = records.to_npy(np.asarray(reader.index))
    rng = random.Random(SEED + 2)
    for n in range(300):
        path = tmp_path / f"index-{n}.npy"
        path.write_bytes(_mutate_bytes(good, rng))

        def read(path=path):
            _, index = _map_index(path, (pack.samples, pack.index_columns), "fuzzed index")
            rows = np.asarray(index)
            _check_rows(rows, pack.shard_bytes, pack.index_columns, "fuzzed index")

        _only_ours(read)


@pytest.mark.parametrize("seed", range(6))
def test_shards_through_both_datasets(tmp_path, monkeypatch, seed):
    """Forged shards (every hash valid) with mutated members, read by both datasets."""
    import uuid

    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    client = rayform.Client(f"memory://fuzz-{uuid.uuid4().hex[:8]}")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=2.0, seed=seed,
                                                                   image_size=24), progress=False))
    pack = client.pack(s, 15, workers=1, progress=False)
    rng = random.Random(SEED + seed)
    victims = set(rng.sample(range(pack.samples), 5))
    forge_pack(client, pack, member=lambda i, name, b: _mutate_bytes(b, rng) if i in victims and rng.random() < 0.6
               else b)
    kw = dict(obs=["cam0/rgb", "wrist/rgb", "joints/position"], action="joints/position_delta", fps=15, horizon=4)
    ds = rayform.torch.EpisodeDataset(client.slices.get(s.id), **kw)
    for i in range(len(ds)):
        _only_ours(ds.__getitem__, i)
    _only_ours(lambda: list(rayform.torch.StreamingEpisodeDataset(client.slices.get(s.id), **kw)))


@pytest.fixture(scope="module")
def video_packed(tmp_path_factory):
    from conftest import add_video_slice

    client = rayform.Client(tmp_path_factory.mktemp("fuzz-video") / "store")
    s = add_video_slice(client, episodes=2, frames=24, size=32)
    return client, s, client.pack(s, 30, image_codec="h264", max_history=1, max_horizon=4, workers=1, progress=False)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_video_clips_and_their_records(video_packed):
    """A video pack's clips.mp, mutated as bytes and as a document (its record, its clips'
    fields, their packets): only rayform's errors, whatever FFmpeg makes of the packets."""
    client, s, pack = video_packed
    reader = PackReader(client.store, pack, pack.members)
    spec = SampleSpec.of(("cam/rgb", "joints"), "joints_delta", horizon=4, history={"cam/rgb": 2})
    rng = random.Random(SEED + 1)
    key, raw = reader.raw(3)
    doc = records.loads(bytes(raw["clips.mp"]))
    for i in range(300):
        builder = SampleBuilder(pack, spec)  # nothing decoded kept from the last try
        sample = dict(raw)
        sample["clips.mp"] = _mutate_bytes(bytes(raw["clips.mp"]), rng)
        _only_ours(builder.build, sample, key)
        mutated = _mutate_doc(doc, rng)
        if rng.random() < 0.3:  # garbage in the packets themselves
            clip = dict(doc["video"]["cam/rgb"])
            clip["packets"] = [_mutate_bytes(p, rng) for p in clip["packets"]]
            mutated = {**doc, "video": {"cam/rgb": clip}}
        sample["clips.mp"] = records.dumps(mutated)
        sample["__clip__"] = (0, i, rng.choice([0, 1, 5, 4095, 10**6]))
        _only_ours(SampleBuilder(pack, spec).build, sample, key)


@pytest.mark.parametrize("seed", range(3))
def test_video_shards_through_both_datasets(tmp_path, monkeypatch, seed):
    """Forged video shards (every hash valid) whose clips are mutated, read by both datasets."""
    from conftest import add_video_slice

    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    client = rayform.Client(tmp_path / "store")
    s = add_video_slice(client, episodes=1, frames=24, size=32)
    pack = client.pack(s, 30, image_codec="h264", max_horizon=4, workers=1, progress=False)
    rng = random.Random(SEED + 10 + seed)
    forge_pack(client, pack, member=lambda i, name, b: _mutate_bytes(b, rng) if rng.random() < 0.5 else b)
    kw = dict(obs=["cam/rgb", "joints"], action="joints_delta", fps=30, horizon=4)
    ds = rayform.torch.EpisodeDataset(client.slices.get(s.id), **kw)
    for i in range(len(ds)):
        _only_ours(ds.__getitem__, i)
    _only_ours(lambda: list(rayform.torch.StreamingEpisodeDataset(client.slices.get(s.id), **kw, batch_size=4)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_rlds_schemas_and_records(tmp_path):
    """An RLDS folder with its schema, its dataset info or an Example's bytes mutated (framed
    again with valid checksums, so the parser sees them): only rayform's errors."""
    import shutil
    import struct
    from pathlib import Path

    pytest.importorskip("google.protobuf", reason="the rlds extra is not installed")
    pytest.importorskip("google_crc32c", reason="the rlds extra is not installed")
    from rayform.converters.rlds import iter_rlds
    from rayform.converters.source_options import SourceOptions
    from rayform.converters.tfrecord import masked_crc, records

    toy = Path(__file__).resolve().parent / "data" / "rlds" / "toy_rlds" / "1.0.0"
    rng = random.Random(SEED)
    shard = "toy_rlds-train.tfrecord-00000-of-00002"
    with open(toy / shard, "rb") as f:
        [[body]] = list(records(f, (toy / shard).stat().st_size, shard))
    docs = {name: json.loads((toy / name).read_text()) for name in ("features.json", "dataset_info.json")}
    for case in range(240):
        folder = tmp_path / f"{case}" / "toy_rlds" / "1.0.0"
        shutil.copytree(toy, folder)
        if case % 3 == 2:
            data = _mutate_bytes(body, rng)
            head = struct.pack("<Q", len(data))
            (folder / shard).write_bytes(head + struct.pack("<I", masked_crc(head)) + data
                                         + struct.pack("<I", masked_crc(data)))
        elif case % 6 == 1:  # a subtree replaced by one nested 10 to 100,000 levels deep
            name = sorted(docs)[case % 2]
            depth = int(10 ** rng.uniform(1, 5))
            deep = rng.choice(["[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth,  # as TFDS nests:
                               '{"featuresDict":{"features":{"x":' * (depth // 3 + 1) + "{}" + "}}}" * (depth // 3 + 1)])
            text = json.dumps(_mutate_doc(docs[name], rng, leaf=DEEP))
            (folder / name).write_text(text.replace(json.dumps(DEEP), deep))
        else:
            name = sorted(docs)[case % 3]
            (folder / name).write_text(json.dumps(_mutate_doc(docs[name], rng)))
        _only_ours(lambda: [None for _ in iter_rlds(folder, SourceOptions(fps=10.0))])
        shutil.rmtree(tmp_path / f"{case}")
