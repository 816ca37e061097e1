"""Packing: determinism, tar layout, sample content, drops, and bad input."""

from __future__ import annotations

import tarfile
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest

import rayform
from rayform import ArrayStream, ImageStream, PackSpec
from rayform.codec import imagecodec, records
from rayform.errors import InvalidInput, StreamNotFound
from rayform.pack.layout import LOWDIM
from rayform.packer import align


def _shard_path(client, pack, i=0):
    return client.store.backend.blob_path(pack.shards[i].sha256)


def test_one_and_two_processes_give_identical_shards(demo_client):
    client, s = demo_client
    spec = dict(shard_bytes=200_000, samples_per_task=16)
    one = client.pack(s, 15, workers=1, progress=False, **spec)
    two = client.pack(s, 15, workers=2, progress=False, force=True, **spec)
    with ThreadPoolExecutor(3) as ex:
        threads = client.pack(s, 15, executor=ex, progress=False, force=True, **spec)
    assert len(one.shards) > 2
    assert [x.sha256 for x in one.shards] == [x.sha256 for x in two.shards] == [x.sha256 for x in threads.shards]
    assert one.digest == two.digest == threads.digest


def test_a_given_process_pool_is_used(demo_client):
    client, s = demo_client
    with ProcessPoolExecutor(2) as ex:
        pooled = client.pack(s, 10, executor=ex, progress=False, samples_per_task=8)
    inline = client.pack(s, 10, workers=1, progress=False, force=True)
    assert [x.sha256 for x in pooled.shards] == [x.sha256 for x in inline.shards]


def test_shards_are_plain_tar_and_the_index_points_at_every_member(demo_client):
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    index = records.from_npy(client.store.get_blob(pack.index_blob))
    assert index.shape == (pack.samples, 3 + 2 * len(pack.members))
    for n, shard in enumerate(pack.shards):
        with tarfile.open(_shard_path(client, pack, n)) as tf:
            infos = tf.getmembers()
        assert all(ti.mtime == 0 and ti.uid == 0 and ti.uname == "" and ti.isfile() for ti in infos)
        rows = index[index[:, 0] == n]
        assert len(rows) == shard.samples
        expected = [(int(r[3 + 2 * j]), int(r[4 + 2 * j])) for r in rows for j in range(len(pack.members))]
        assert [(ti.offset_data, ti.size) for ti in infos] == expected
        assert [ti.name.split(".", 1)[1] for ti in infos[: len(pack.members)]] == pack.members


def test_webdataset_reads_the_shards_unmodified(demo_client):
    import webdataset as wds

    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    urls = [_shard_path(client, pack, i) for i in range(len(pack.shards))]
    samples = list(wds.WebDataset(urls, shardshuffle=False))
    assert len(samples) == pack.samples
    assert {"__key__", "__url__", "cam0.rgb.jpg", "wrist.rgb.jpg", LOWDIM} <= set(samples[0])
    first = records.loads(samples[0][LOWDIM])
    assert first["segment"] == s.segments[0].id and first["slice"] == s.id


def test_kept_images_are_the_recorded_bytes_never_from_beyond_the_snap(demo_client):
    """The frame at or before each instant, a frame stamped within 1% of a period after it
    counting as at it (PackSpec.snap); never one later than that."""
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False)
    seg = s.segment(0)
    ts = seg.timestamps("cam0/rgb")
    snap = int(0.01 * np.median(np.diff(ts)))
    with tarfile.open(_shard_path(client, pack)) as tf:
        members = {ti.name: tf.extractfile(ti).read() for ti in tf.getmembers()}
    keys = sorted({n.split(".", 1)[0] for n in members if n.startswith(seg.id)})
    assert len(keys) == pack.segments[0]["samples"]
    for key in keys[:20]:
        low = records.loads(members[f"{key}.{LOWDIM}"])
        frame = int(np.searchsorted(ts, low["t_ns"] + snap, side="right") - 1)
        assert ts[frame] <= low["t_ns"] + snap
        assert members[f"{key}.cam0.rgb.jpg"] == seg.frame_bytes("cam0/rgb", frame)


def test_each_sample_carries_its_future_window(demo_client):
    client, s = demo_client
    pack = client.pack(s, 15, workers=1, progress=False, max_horizon=8)
    seg = s.segment(0)
    ts, q = seg.timestamps("joints/position"), seg.values("joints/position")
    lows = []
    for i in range(len(pack.shards)):  # interleaved: a segment's samples are spread over every shard
        with tarfile.open(_shard_path(client, pack, i)) as tf:
            lows += [records.loads(tf.extractfile(ti).read()) for ti in tf.getmembers() if ti.name.endswith(LOWDIM)]
    lows = sorted((x for x in lows if x["segment"] == seg.id), key=lambda x: x["t_ns"])
    for low in (lows[0], lows[-1]):
        future = records.unpack_array(low["arrays"]["joints/position"]["future"])
        pad = records.unpack_array(low["arrays"]["joints/position"]["pad"])
        assert future.shape == (9, 8) and pad.shape == (9,)
        when = low["t_ns"] + np.round(np.arange(9) * 1e9 / 15).astype(np.int64)
        np.testing.assert_allclose(future, align.interpolate(ts, q, np.minimum(when, ts[-1])), rtol=1e-6)
        assert pad.tolist() == (when > ts[-1]).tolist()
    assert not records.unpack_array(lows[0]["arrays"]["joints/position"]["pad"]).any()
    assert records.unpack_array(lows[-1]["arrays"]["joints/position"]["pad"]).any()
    assert lows[0]["segment_version"] == seg.version and lows[0]["site"] == "lab"


def test_reencoding_and_resizing_images(demo_client):
    client, s = demo_client
    pack = client.pack(s, 5, workers=1, progress=False, image_codec="jpeg", jpeg_quality=50, resize=(32, 48))
    assert pack.schema["cam0/rgb"].shape == (32, 48, 3)
    with tarfile.open(_shard_path(client, pack)) as tf:
        ti = next(t for t in tf.getmembers() if t.name.endswith("cam0.rgb.jpg"))
        assert imagecodec.decode_jpeg(tf.extractfile(ti).read()).shape == (32, 48, 3)
    png = client.pack(s, 5, workers=1, progress=False, image_codec="png")
    assert png.schema["cam0/rgb"].member == "cam0.rgb.png"


def test_stale_instants_are_dropped_and_counted(client):
    ms = 1_000_000
    cam_t = np.array([0, 100, 200, 300, 700, 800, 900, 1000], np.int64) * ms  # 300..700 ms lost
    frames = [imagecodec.encode_jpeg(np.zeros((8, 8, 3), np.uint8))] * len(cam_t)
    arr_t = np.arange(0, 1001, 10, dtype=np.int64) * ms
    ref = client.segments.add("lab", "gappy", [
        ImageStream("cam", cam_t, frames),
        ArrayStream("x", arr_t, np.zeros((len(arr_t), 1), np.float32)),
    ])
    s = client.slices.create([ref])
    pack = client.pack(s, 10, workers=1, progress=False, staleness=1.5)  # tolerance 150 ms
    # grid 0,100,...,1000 ms: 500 and 600 ms see a frame 200/300 ms old
    assert pack.instants == 11 and pack.samples == 9
    assert pack.dropped == {"instants": 2, "by_stream": {"cam": 2, "x": 0}}


def test_a_missing_stream_is_one_clear_error(demo_client):
    client, s = demo_client
    with pytest.raises(StreamNotFound, match="no stream 'depth'"):
        client.pack(s, 15, streams=["cam0/rgb", "depth"], progress=False)


def test_bad_pack_parameters_are_refused():
    with pytest.raises(InvalidInput, match="fps"):
        PackSpec(fps=0)
    with pytest.raises(InvalidInput, match="codec"):
        PackSpec(fps=10, image_codec="webp")


def test_packing_again_returns_the_stored_pack(demo_client, monkeypatch):
    client, s = demo_client
    first = client.pack(s, 15, workers=1, progress=False)
    import rayform.packer.driver as packing

    monkeypatch.setattr(packing, "_render_pack", lambda *a, **k: pytest.fail("packed twice"))
    assert client.pack(s, 15, workers=1, progress=False).digest == first.digest
    assert client.packs.find(s, 15, ["cam0/rgb"], horizon=16).digest == first.digest


def test_the_interleave_seed_is_checked_and_a_pack_without_one_is_in_time_order():
    for bad in (-1, "0", 1.5, True):
        with pytest.raises(InvalidInput, match="interleave seed"):
            PackSpec(fps=10, interleave_seed=bad)
    assert PackSpec(fps=10).to_manifest()["interleave_seed"] == 0
    in_time = PackSpec(fps=10, interleave_seed=None).to_manifest()
    assert "interleave_seed" not in in_time  # as written before interleaving: the same pack key
    assert PackSpec.from_manifest(in_time).interleave_seed is None


def test_an_interleaved_pack_holds_the_same_samples_spread_over_every_shard(demo_client):
    from rayform.packer.placement import ShardLayout
    from rayform.read.reader import PackReader

    client, s = demo_client
    mixed = client.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16)
    in_time = client.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16, interleave_seed=None)
    assert mixed.spec.interleave_seed == 0 and in_time.spec.interleave_seed is None and len(mixed.shards) >= 3

    def samples(pack):
        reader = PackReader(client.store, pack, pack.members)
        return [(key, {m: bytes(v) for m, v in raw.items()}) for key, raw in reader.raw_many(range(pack.samples))]

    a, b = samples(mixed), samples(in_time)
    order = ShardLayout(in_time.samples, 1, 0).order()
    assert [raw for _, raw in a] != [raw for _, raw in b]
    # the same samples, byte for byte, each at the position the permutation gives it
    assert [raw for _, raw in a] == [b[i][1] for i in order]
    # interleaved, (nearly) every shard holds samples of both segments; in time order one shard at most

    def both(pack):
        reader, first, n = PackReader(client.store, pack, pack.members), 0, 0
        for shard in pack.shards:
            lows = [records.loads(raw[LOWDIM]) for _, raw in reader.raw_many(range(first, first + shard.samples))]
            n += len({low["segment"] for low in lows}) == 2
            first += shard.samples
        return n

    full = sum(sh.samples >= 8 for sh in mixed.shards)  # a shard of a few samples may hold one segment
    assert both(mixed) >= full - 1 and both(in_time) <= 1


def test_the_datasets_choose_the_interleaved_pack(demo_client):
    client, s = demo_client
    client.pack(s, 15, workers=1, progress=False, interleave_seed=None)
    assert client.packs.find(s, 15, ["cam0/rgb"], horizon=16).spec.interleave_seed is None  # the only one
    mixed = client.pack(s, 15, workers=1, progress=False)
    assert client.packs.find(s, 15, ["cam0/rgb"], horizon=16).digest == mixed.digest


def _camera_and_joints(client, name: str, jitter_ns: int, seed: int = 0):
    """Two seconds: a 30 Hz camera whose frame i is all value 4·i, joints at 100 Hz; every
    timestamp moved by up to ±jitter_ns (as float seconds make them), order kept."""
    rng = np.random.default_rng(seed)
    cam_t = np.round(np.arange(60) * (1e9 / 30)).astype(np.int64)
    arr_t = np.arange(200, dtype=np.int64) * 10_000_000
    cam_t = cam_t + rng.integers(-jitter_ns, jitter_ns + 1, len(cam_t))
    arr_t = arr_t + rng.integers(-jitter_ns, jitter_ns + 1, len(arr_t))
    frames = [imagecodec.encode_png(np.full((8, 8, 3), 4 * i, np.uint8)) for i in range(60)]
    ref = client.segments.add("lab", name, [
        ImageStream("cam", cam_t, frames),
        ArrayStream("x", arr_t, np.linspace(0, 1, 200, dtype=np.float32)[:, None]),
    ])
    return client.slices.create([ref], name=name)


def test_timestamps_a_microsecond_off_the_grid_pack_the_same_samples_and_frames(client):
    """±1 µs of jitter: the same instants kept, the same frame at each (not the one before,
    33 ms stale), the same pad mask, as exact timestamps."""
    import rayform

    seen = {}
    for name, jitter, snap in (("exact", 0, 0.01), ("jittered", 1_000, 0.01), ("unsnapped", 1_000, 0)):
        s = _camera_and_joints(client, name, jitter)
        pack = client.pack(s, 30, workers=1, progress=False, max_horizon=4, interleave_seed=None, snap=snap)
        ds = rayform.torch.EpisodeDataset(s, obs=["cam"], action="x", fps=30, horizon=4)
        samples = sorted((ds[i] for i in range(len(ds))), key=lambda x: x["meta"]["frame_index"])
        seen[name] = (pack.samples, [int(x["cam"][0, 0, 0]) for x in samples],
                      [x["action_is_pad"].tolist() for x in samples], [x["meta"]["frame_index"] for x in samples])
    assert seen["exact"][0] == 60 and seen["jittered"] == seen["exact"]
    assert seen["exact"][1] == [4 * i for i in range(60)]  # frame i at instant i
    assert seen["unsnapped"][1] != seen["exact"][1]  # aligned exactly, the jitter shows stale frames
    exact = PackSpec(fps=30, snap=0)
    assert "snap" not in exact.to_manifest() and PackSpec.from_manifest(exact.to_manifest()).snap == 0


@pytest.mark.parametrize("sizes", [(0, 1, 511), (512, 513, 1024), (7, 70_000, 12_345)])
def test_shards_are_byte_for_byte_what_webdataset_s_tarwriter_writes(tmp_path, sizes):
    """The shard writer makes its headers from a template for speed; the bytes must still be
    TarWriter's with the same pinned fields (and so keep every existing pack's name)."""
    import io
    import random

    import webdataset as wds

    from rayform.packer.tar_writer import ShardWriter

    rng = random.Random(sum(sizes))
    members = ["cam0.rgb.jpg", "lowdim.mp", "wrist.rgb.h1.png"]
    samples = [(f"seg_{i:012x}-0123abcd-{i:06d}", {m: rng.randbytes(rng.choice(sizes)) for m in members})
               for i in range(40)]
    writer = ShardWriter(str(tmp_path), 1 << 40, members)
    for key, sample in samples:
        assert list(writer.add(key, sample)) == []
    (shard,) = writer.finish()
    reference = io.BytesIO()
    tar = wds.TarWriter(reference, user="", group="", mode=0o444, encoder=False, mtime=0, format="USTAR_FORMAT")
    for key, sample in samples:
        tar.write({"__key__": key, **sample})
    tar.close()
    assert open(shard.path, "rb").read() == reference.getvalue()
    with tarfile.open(shard.path) as tf:  # and every index row points at its member's bytes
        for (key, sample), row in zip(samples, shard.index):
            for j, m in enumerate(sorted(members)):
                info = tf.getmember(f"{key}.{m}")
                assert (info.offset_data, info.size) == (row[2 + 2 * j], row[3 + 2 * j]) == \
                    (row[2 + 2 * j], len(sample[m]))


def test_a_script_on_stdin_packs_on_two_processes(tmp_path):
    """A disabled tqdm bar still starts tqdm's monitor thread; it must not push the pool to
    forkserver, which cannot re-run a script read from stdin in its workers."""
    import subprocess
    import sys

    script = (
        "import rayform\n"
        "from rayform.converters.demo import DemoConfig, ingest_demo\n"
        f"c = rayform.Client({str(tmp_path / 'store')!r})\n"
        "s = c.slices.create(ingest_demo(c, 'lab', DemoConfig(episodes=2, seconds=2.0, image_size=16), progress=False))\n"
        "p = c.pack(s, 15, workers=2, progress=False, samples_per_task=8)\n"
        "print(p.samples)\n"
    )
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) > 0


def test_a_large_slices_pack_keeps_its_segments_entries_apart(packed_small, monkeypatch):
    """A pack of a slice of ``SEGMENTS_APART`` segments or more keeps what it says of each one in
    a blob of its own, so opening the pack parses no per-episode list; the walk reaches it."""
    from rayform.ops.references import pack_closure
    from rayform.packer import driver

    client, s = packed_small
    listed = client.pack(s, 10, workers=1, progress=False)
    monkeypatch.setattr(driver, "SEGMENTS_APART", 2)
    apart = client.pack(s, 10, workers=1, progress=False, force=True)
    manifest = client.store.get_json_blob(apart.digest)
    assert manifest["segments"] == {"blob": apart.segments_blob, "count": len(s.segments)}
    assert apart.segments_of(client.store) == listed.segments
    assert apart.segments_blob in {r.blob for r in pack_closure(apart)}
    with pytest.raises(rayform.InvalidInput, match="segments_of"):
        apart.segments
    reread = rayform.Pack(apart.digest, manifest)
    assert reread.manifest == manifest and reread.samples == listed.samples


def test_a_pack_whose_shard_went_before_its_commit_records_nothing(demo_client, monkeypatch):
    """A gc with a grace shorter than the pack (``--force``) deleted a shard meanwhile: the pack
    checks its blobs before its ref and fails naming the fix, rather than name data that is gone."""
    from rayform.packer import driver

    client, s = demo_client
    real = driver.write_manifest

    def shard_taken(**kw):
        client.store.blob_file(kw["stored"].shards[0].sha256).unlink()
        return real(**kw)

    monkeypatch.setattr(driver, "write_manifest", shard_taken)
    with pytest.raises(rayform.errors.StoreError, match="deleted before its commit.*longer --grace"):
        client.pack(s, 15, streams=["joints/position"], progress=False)
    assert client.packs.list(s) == []


def test_a_pack_manifest_taken_right_before_its_ref_is_written_again(demo_client, monkeypatch):
    """A gc that decided before the ref was written deletes the manifest it did not see reached:
    once the ref is there, the pack confirms its manifest and writes it again."""
    client, s = demo_client
    real = type(client.store).put_ref

    def manifest_taken(self, key, obj):
        if key.startswith("refs/packs/"):
            self.blob_file(obj["manifest"]).unlink()
        return real(self, key, obj)

    monkeypatch.setattr(type(client.store), "put_ref", manifest_taken)
    pack = client.pack(s, 15, streams=["joints/position"], progress=False)
    monkeypatch.undo()
    assert [p.digest for p in rayform.Client(client.store.url).packs.list(s)] == [pack.digest]
