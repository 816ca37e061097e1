"""A hostile store: refs and manifests (with valid hashes) that name files outside the cache,
lie about sizes, or hold content rayform never wrote. Every attempt must end in one rayform
error, and no file outside the cache may change (the tree around it is hashed before and after).

The store is ``memory://`` (not local, so it is read through the cache, as S3 is).
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from conftest import segment_manifest

import rayform
from hostile import forge_pack, run_cli, unchanged
from rayform.codec import records
from rayform.converters.demo import DemoConfig, ingest_demo
from rayform.errors import Malformed, RayformError

TINY = DemoConfig(episodes=2, seconds=2.0, seed=3, image_size=32)


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """(client, slice, pack, around, cache): a packed demo in a fresh memory store; the cache
    inside ``around``, which also holds the files a hostile store would like to reach."""
    around = tmp_path
    cache = around / "cache"
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(cache))
    (around / "victim.txt").write_text("precious")
    (around / "sub").mkdir()
    (around / "sub" / "outside.txt").write_text("also precious")
    url = f"memory://hostile-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("RAYFORM_STORE", url)
    client = rayform.Client(url)
    s = client.slices.create(ingest_demo(client, "lab", TINY, progress=False), name="tiny")
    pack = client.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16)
    return client, s, pack, tmp_path, cache


class CliRefused(Exception):
    """The CLI said no the right way: one line, exit 2."""


def attempts(client, slice_id):
    """Every way a user reads a slice: the library, both datasets, and the CLI."""
    def episode():
        ds = rayform.torch.EpisodeDataset(client.slices.get(slice_id), obs=["cam0/rgb", "joints/position"],
                                          action="joints/position_delta", fps=15)
        for i in range(len(ds)):
            ds[i]

    def streaming():
        ds = rayform.torch.StreamingEpisodeDataset(client.slices.get(slice_id), obs=["cam0/rgb", "joints/position"],
                                                   action="joints/position_delta", fps=15)
        for _ in ds:
            pass

    def command(*args):
        def run():
            code, err = run_cli(*args)
            assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (code, err)
            raise CliRefused(err)
        return run

    return {"get": lambda: client.slices.get(slice_id), "episode": episode, "streaming": streaming,
            "show": command("slices", "show", slice_id), "pull": command("pull", slice_id),
            "verify": command("verify", slice_id)}


LEVELS = {  # which attempts read what: a slice ref or manifest, a pack manifest, or sample content
    "slice": ("get", "episode", "streaming", "show", "pull", "verify"),
    "pack": ("episode", "streaming", "show", "pull", "verify"),
    "content": ("episode", "streaming"),
}


def _every_attempt_fails_cleanly(client, slice_id, around, cache, expect=RayformError, level="slice"):
    with unchanged(around, cache):
        for name, attempt in attempts(client, slice_id).items():
            if name not in LEVELS[level]:
                continue
            with pytest.raises((expect, CliRefused)):
                attempt()


@pytest.mark.parametrize("manifest", [
    "/abs/victim", "../../../victim.txt", "../outside.txt", "zz" * 32, "A" * 64, 5, None, ["x"], {"a": 1}, "",
])
def test_a_slice_ref_naming_anything_but_a_digest_touches_nothing(hostile, manifest):
    client, s, pack, around, cache = hostile
    victim = around / "victim.txt"
    if manifest == "/abs/victim":
        manifest = str(victim)
    sid = "slc_" + "ab" * 4
    client.store.put_ref(f"refs/slices/{sid}.json", {"id": sid, "manifest": manifest})
    _every_attempt_fails_cleanly(client, sid, around, cache)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("ref", [
    [], "x", {"id": "slc_ffffffff", "manifest": "0" * 64}, {"manifest": "0" * 64}, 3,
])
def test_refs_of_the_wrong_shape_or_id_are_malformed(hostile, ref):
    client, s, pack, around, cache = hostile
    sid = "slc_" + "cd" * 4
    client.store.backend.fs.pipe_file(f"{client.store.root}/refs/slices/{sid}.json", json.dumps(ref).encode())
    with unchanged(around, cache), pytest.raises(Malformed):
        client.slices.get(sid)
    assert client.store.cache.get_ref(client.store.id, f"refs/slices/{sid}.json") is None  # never cached


def test_a_ref_that_is_not_json_is_never_cached(hostile, monkeypatch):
    client, s, pack, around, cache = hostile
    sid = "slc_" + "ef" * 4
    client.store.backend.fs.pipe_file(f"{client.store.root}/refs/slices/{sid}.json", b"{not json")
    with pytest.raises(Malformed, match=f"refs/slices/{sid}.json"):
        client.slices.get(sid)
    monkeypatch.setenv("RAYFORM_OFFLINE", "1")
    with pytest.raises(rayform.OfflineError):  # not a poisoned copy: simply not cached
        client.slices.get(sid)


SLICE_MANIFESTS = [
    {"segments": [{"id": "../../x", "version": "0" * 64, "site": "lab"}]},
    {"segments": [{"id": "seg_000000000000", "version": "/etc/passwd", "site": "lab"}]},
    {"segments": [{"id": "seg_000000000000", "version": "0" * 64, "site": ".."}]},
    {"segments": [{"id": "seg_000000000000", "version": "0" * 64, "site": "lab", "start_ns": "x"}]},
    {"segments": "nope"},
    {"segments": [7]},
    {"name": 5, "segments": []},
]


@pytest.mark.parametrize("body", SLICE_MANIFESTS)
def test_slice_manifests_with_hostile_content_are_malformed(hostile, body):
    client, s, pack, around, cache = hostile
    digest = client.store.put_json_blob({"format": "rayform.slice/1", "name": None, **body})
    sid = "slc_" + digest[:8]
    client.store.put_ref(f"refs/slices/{sid}.json", {"id": sid, "manifest": digest})
    _every_attempt_fails_cleanly(client, sid, around, cache, Malformed)


def _edit_segment_manifest(client, s, edit):
    """The slice's first segment re-stored with ``edit`` applied to its manifest; a new slice of it."""
    seg = s.segments[0]
    m = segment_manifest(client, seg)
    edit(m)
    version = client.store.put_json_blob(m)
    return client.slices.create([{"id": seg.id, "version": version}], name="edited")


@pytest.mark.parametrize("edit", [
    lambda m: m["streams"]["joints/position"].update(timestamps="/abs/victim"),
    lambda m: m["streams"]["joints/position"].update(data=[["../../victim.txt", 1]]),
    lambda m: m["streams"]["joints/position"].update(dtype="O"),
    lambda m: m["streams"]["joints/position"].update(shape=[1 << 40, 1 << 40]),
    lambda m: m["streams"]["joints/position"].update(count=-1),
    lambda m: m["streams"]["cam0/rgb"].update(sizes="x" * 64),
    lambda m: m["streams"].update({"../x": m["streams"]["cam0/rgb"]}),
    lambda m: m.update(site="../.."),
    lambda m: m.update(streams=[]),
])
def test_segment_manifests_with_hostile_content_are_malformed(hostile, edit):
    client, s, pack, around, cache = hostile
    with unchanged(around, cache), pytest.raises(Malformed):
        edited = _edit_segment_manifest(client, s, edit)
        client.pack(edited, 15, workers=1, progress=False)


@pytest.mark.parametrize("edit", [
    lambda m: m["shards"][0].update(sha256="/abs/victim"),
    lambda m: m["shards"][0].update(sha256="../../../victim.txt"),
    lambda m: m.update(index="../outside.txt"),
    lambda m: m["chunks"].update(digests="/etc/passwd"),
    lambda m: m["shards"][0].update(bytes=-5),
    lambda m: m["shards"][0].update(samples="many"),
    lambda m: m.update(samples=10**15),
    lambda m: m.update(members=["../../x"]),
    lambda m: m["schema"]["cam0/rgb"].update(member="../../x.jpg"),
    lambda m: m["schema"]["cam0/rgb"].update(shape=[30000, 30000, 3]),
    lambda m: m["schema"]["joints/position"].update(dtype="O"),
    lambda m: m["spec"].update(fps="fast"),
    lambda m: m["spec"].update(bogus=1),
    lambda m: m.update(shards={}),
    lambda m: m.update(format="rayform.pack/999"),
])
def test_pack_manifests_with_hostile_content_touch_nothing(hostile, edit):
    client, s, pack, around, cache = hostile
    forge_pack(client, pack, manifest=edit)
    _every_attempt_fails_cleanly(client, s.id, around, cache, level="pack")


@pytest.mark.parametrize("index", [
    lambda rows: records.to_npy(rows[:-1]),  # fewer rows than samples
    lambda rows: records.to_npy(rows.astype(np.int32)),
    lambda rows: records.to_npy(np.where(np.arange(rows.shape[1]) == 2, rows + (1 << 40), rows)),
    lambda rows: records.to_npy(np.where(np.arange(rows.shape[1]) == 0, 99, rows)),
    lambda rows: records.to_npy(np.where(np.arange(rows.shape[1]) == 4, -1, rows)),
    lambda rows: records.to_npy(rows)[:-8],  # header claims more than the file holds
    lambda rows: records.to_npy(rows).replace(b"'shape': (", b"'shape': (99999999999, "),
    lambda rows: b"\x93NUMPY\x01\x00\x10\x00{'descr': lambda}  \n",
])
def test_indexes_with_hostile_content_touch_nothing(hostile, index):
    client, s, pack, around, cache = hostile
    forge_pack(client, pack, index=index)
    _every_attempt_fails_cleanly(client, s.id, around, cache, level="content")


def _jpeg_claiming(data: bytes, height: int, width: int) -> bytes:
    """The same JPEG with its frame header (SOF0/SOF2) claiming another size."""
    out = bytearray(data)
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = out.find(marker)
        if at >= 0:
            out[at + 5 : at + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
            return bytes(out)
    raise AssertionError("no frame header")


@pytest.mark.parametrize("size", [(30000, 30000), (60000, 60000), (16, 16)])
def test_an_image_header_claiming_another_size_is_refused_before_decoding(hostile, size):
    client, s, pack, around, cache = hostile
    forge_pack(client, pack, member=lambda i, name, b: _jpeg_claiming(b, *size) if name.endswith(".jpg") and i == 3
               else b)
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _every_attempt_fails_cleanly(client, s.id, around, cache, Malformed, level="content")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 500  # 30000x30000 RGB would be 2.6 GB


@pytest.mark.parametrize("lowdim", [
    b"", b"\xc1", b"\x92\x01", b"\x81\xa1a\x01",
    records.dumps({"t_ns": "x", "arrays": {}, "slice": 1, "segment": 2, "segment_version": 3, "site": 4}),
])
def test_records_with_hostile_content_are_malformed(hostile, lowdim):
    client, s, pack, around, cache = hostile
    forge_pack(client, pack, member=lambda i, name, b: lowdim if name == "lowdim.mp" else b)
    _every_attempt_fails_cleanly(client, s.id, around, cache, Malformed, level="content")


def test_a_listing_key_with_dot_dots_is_skipped_and_nothing_is_written_outside(hostile):
    client, s, pack, around, cache = hostile
    ref = {"id": s.segments[0].id, "site": "lab", "name": "x", "versions": [s.segments[0].version]}
    root = client.store.root
    for key in ["refs/segments/lab/../../../../../x.json", "refs/segments/lab/.hidden.json",
                "refs/segments/lab/seg_zzz.json", "refs/slices/../../../x.json"]:
        client.store.backend.fs.pipe_file(f"{root}/{key}", json.dumps(ref).encode())
    with unchanged(around, cache):
        listed = client.segments.list()
        assert {r.id for r in listed} == {x.id for x in s.segments}
        assert client.slices.list()
    assert not [p for p in around.parent.rglob("x.json") if cache not in p.parents]


def test_a_pack_declaring_a_huge_camera_is_refused_before_a_batch_buffer_is_allocated(hostile):
    """16384x16384 is within the sides a schema may declare; 64 of them are 51 GB. The batch
    buffer is refused before it is allocated, saying which stream and size."""
    torch = pytest.importorskip("torch")
    client, s, pack, around, cache = hostile
    forge_pack(client, pack, manifest=lambda m: m["schema"]["cam0/rgb"].update(shape=[16384, 16384, 3]))
    ds = rayform.torch.EpisodeDataset(client.slices.get(s.id), obs=["cam0/rgb"], action="joints/position", fps=15)
    with unchanged(around, cache), pytest.raises(Malformed, match=r"more than half.*cam0/rgb is 16384x16384x3"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=64)))
