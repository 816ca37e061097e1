"""RLDS (TFDS folder layout) into segments, on a dataset TensorFlow Datasets' own writer made
(``tests/data/rlds/make_rlds.py``), read here without TensorFlow; every value checked against
what the writer was given, every image against the bytes TFDS reads back."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import rayform
from rayform.codec import imagecodec
from rayform.converters.rlds import RldsDataset, iter_rlds
from rayform.converters.source_options import SourceOptions
from rayform.converters.tfrecord import masked_crc, records
from rayform.errors import InvalidInput

# the reader's libraries (the rlds extra) are imported when a shard is read
pytest.importorskip("google.protobuf", reason="the rlds extra (protobuf, google-crc32c) is not installed")
pytest.importorskip("google_crc32c", reason="the rlds extra (protobuf, google-crc32c) is not installed")

DATA = Path(__file__).resolve().parents[1] / "data" / "rlds"
TOY = DATA / "toy_rlds" / "1.0.0"
EXPECTED = json.loads((DATA / "expected.json").read_text())
FPS = 10.0


@pytest.fixture(scope="module")
def given():
    with np.load(DATA / "expected.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def toy_client(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("rlds") / "store")
    report = client.ingest("rlds", [TOY], "toy", options={"fps": FPS}, slice_name="toy", workers=2, progress=False)
    return client, report


def _segment(client, split: str, index: int):
    [row] = [s for s in client.segments.list(site="toy") if s.name == f"toy_rlds/{split}/episode_{index:06d}"]
    return client.segments.get(row.id)


def test_every_value_is_what_the_tfds_writer_was_given(toy_client, given):
    client, report = toy_client
    assert len(report.segments) == sum(len(v) for v in EXPECTED["splits"].values()) == 4
    for split, episodes in EXPECTED["splits"].items():
        for index, want in enumerate(episodes):  # the split's order, as TFDS reads it
            seg = _segment(client, split, index)
            key = want["episode_id"]
            n = want["steps"]
            assert seg.timestamps("observation/state").tolist() == [round(k * 1e9 / FPS) for k in range(n)]
            for stream, feature in [("observation/state", "observation/state"), ("action/value", "action"),
                                    ("reward", "reward"), ("discount", "discount"),
                                    ("observation/depth", "observation/depth"), ("observation/mask", "observation/mask"),
                                    ("observation/gripper_closed", "observation/gripper_closed")]:
                values = seg.values(stream)
                assert values.dtype == given[f"{key}/{feature}"].dtype, stream
                np.testing.assert_array_equal(values, given[f"{key}/{feature}"], err_msg=stream)
            # TFDS stores float64 tensors as float lists (float32), and reads them back as float64 of those
            joints = seg.values("observation/joints_f64")
            assert joints.dtype == np.float64
            np.testing.assert_array_equal(joints, given[f"{key}/observation/joints_f64"].astype(np.float32))
            for flag in ("is_first", "is_last", "is_terminal"):
                assert seg.values(flag).dtype == np.bool_ and seg.values(flag).tolist() == want[flag]
            assert seg.meta["task"] == want["language_instruction"][0]
            distinct = list(dict.fromkeys(want["language_instruction"]))
            assert seg.meta.get("instructions", distinct[:1] if len(distinct) == 1 else None) == \
                (distinct if len(distinct) > 1 else distinct[:1])
            assert seg.meta["episode_metadata"] == {"episode_id": key, "file_path": want["file_path"]}
            assert seg.meta["split"] == split and seg.meta["episode_index"] == index
            for cam, digests in (("observation/image", want["image_sha256"]),
                                 ("observation/wrist_image", want["wrist_image_sha256"])):
                stored = [seg.frame_bytes(cam, k) for k in range(n)]
                assert [hashlib.sha256(b).hexdigest() for b in stored] == digests  # the recorded bytes
            png = np.stack([imagecodec.decode(seg.frame_bytes("observation/wrist_image", k), "png") for k in range(n)])
            np.testing.assert_array_equal(png, given[f"{key}/observation/wrist_image"])  # lossless, exactly
            jpeg = np.stack([imagecodec.decode(seg.frame_bytes("observation/image", k), "jpeg") for k in range(n)])
            assert np.abs(jpeg.astype(int) - given[f"{key}/observation/image"]).mean() < 8  # another image: ~80


def test_a_changing_instruction_is_kept_in_order(toy_client):
    client, _ = toy_client
    seg = _segment(client, "train", 1)
    assert seg.meta["task"] == "open the drawer"
    assert seg.meta["instructions"] == ["open the drawer", "close the drawer"]


def test_it_packs_and_trains_with_the_readme_snippet(toy_client):
    torch = pytest.importorskip("torch")
    client, report = toy_client
    pack = client.pack(report.slice, fps=FPS, progress=False)
    assert pack.samples == sum(e["steps"] for v in EXPECTED["splits"].values() for e in v)
    ds = rayform.torch.EpisodeDataset(report.slice, obs=["observation/image", "observation/state"],
                                      action="action/value", fps=FPS, horizon=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
    batches = list(loader)
    assert sum(len(b["observation/state"]) for b in batches) == pack.samples
    b = batches[0]
    assert tuple(b["observation/image"].shape[1:]) == (3, 48, 64) and tuple(b["action"].shape[1:]) == (4, 7)


def test_list_names_each_feature_and_the_stream_it_becomes():
    from rayform.converters.formats import describe

    lines = describe("rlds", TOY)
    assert "train: 2 episodes in 2 shards" in lines[0] and "--fps" in lines[0]
    joined = "\n".join(lines)
    for feature, target in [("steps/observation/image", "stream observation/image"),
                            ("steps/action", "stream action/value"),
                            ("steps/language_instruction", "task (each distinct value under metadata texts too)"),
                            ("episode_metadata/file_path", "metadata episode_metadata.file_path")]:
        assert any(line.split()[0] == feature and line.endswith(f"-> {target}") for line in lines[1:]), joined


def test_splits_shards_and_mapping(tmp_path):
    episodes = list(iter_rlds(TOY, SourceOptions(fps=FPS, splits=("val",), mapping={"observation/depth": None,
                                                                                 "observation/image": "front/rgb"})))
    assert [name for name, _, _ in episodes] == ["toy_rlds/val/episode_000000", "toy_rlds/val/episode_000001"]
    names = {s.name for s in episodes[0][1]}
    assert "front/rgb" in names and "observation/depth" not in names and "observation/image" not in names
    with pytest.raises(InvalidInput, match="no split 'test'"):
        list(iter_rlds(TOY, SourceOptions(fps=FPS, splits=("test",))))
    with pytest.raises(InvalidInput, match="no step feature 'nope'"):
        RldsDataset(TOY, {"nope": "x"})
    with pytest.raises(InvalidInput, match="pass --fps"):
        list(iter_rlds(TOY, SourceOptions()))


def _copy(tmp_path) -> Path:
    target = tmp_path / "toy_rlds" / "1.0.0"
    shutil.copytree(TOY, target)
    return target


def _shard(folder: Path) -> Path:
    return folder / "toy_rlds-train.tfrecord-00001-of-00002"


def _store_unchanged_after_failed_ingest(tmp_path, folder: Path, match: str) -> None:
    client = rayform.Client(tmp_path / "store")
    client.ingest("rlds", [TOY], "before", options={"fps": FPS}, workers=1, progress=False)
    before = sorted(p.relative_to(tmp_path / "store") for p in (tmp_path / "store").rglob("*") if p.is_file())
    with pytest.raises(InvalidInput, match=match):
        client.ingest("rlds", [folder], "toy", options={"fps": FPS}, workers=2, progress=False)
    after = sorted(p.relative_to(tmp_path / "store") for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert after == before  # nothing of the failed ingest stays (the other shard's task wrote, and was taken back)


def test_a_flipped_byte_is_a_checksum_error_naming_shard_and_record(tmp_path):
    folder = _copy(tmp_path)
    data = bytearray(_shard(folder).read_bytes())
    data[len(data) // 2] ^= 0x40
    _shard(folder).write_bytes(bytes(data))
    _store_unchanged_after_failed_ingest(tmp_path, folder, r"tfrecord-00001-of-00002: record 0 at byte 0: the "
                                                           r"record's checksum does not match")


def test_a_truncated_shard_is_refused_and_the_store_unchanged(tmp_path):
    folder = _copy(tmp_path)
    data = _shard(folder).read_bytes()
    _shard(folder).write_bytes(data[:-100])
    _store_unchanged_after_failed_ingest(tmp_path, folder, r"tfrecord-00001-of-00002: record 0 at byte 0: a record "
                                                           r"of \d+ bytes, more than is left of the file")


def _rewrite(shard: Path, change) -> None:
    """The shard's records parsed, changed by ``change(features)`` and framed again with valid
    checksums (the damage is in the content, not the framing)."""
    from rayform.converters.tfrecord import _example_class

    out = bytearray()
    with open(shard, "rb") as f:
        for [data] in records(f, shard.stat().st_size, "test"):
            example = _example_class()()
            example.ParseFromString(data)
            change(example.features.feature)
            body = example.SerializeToString()
            head = struct.pack("<Q", len(body))
            out += head + struct.pack("<I", masked_crc(head)) + body + struct.pack("<I", masked_crc(body))
    shard.write_bytes(bytes(out))


@pytest.mark.parametrize("change, match", [
    (lambda f: f.pop("steps/observation/state"), r"record 0: feature steps/observation/state is missing"),
    (lambda f: f["steps/action"].float_list.value.pop(), r"record 0, feature steps/action: 48 values, not a whole "
                                                         r"number of steps of shape \[7\]"),
    (lambda f: f["steps/reward"].float_list.value.append(0.0), r"record 0, feature steps/\w+: \d+ steps where the "
                                                               r"others have \d+"),
    (lambda f: f["steps/observation/image"].bytes_list.value.__setitem__(0, b"\xff\xd8\xff\xe0 not a jpeg"),
     r"observation/image"),
    (lambda f: f["steps/observation/state"].float_list.value.__setitem__(3, float("nan")),
     r"observation/state.*not finite|non-finite|NaN"),
    (lambda f: f["steps/observation/depth"].bytes_list.value.__setitem__(1, b"garbage"),
     r"feature steps/observation/depth: step 1 is not zlib data"),
    (lambda f: f["steps/observation/mask"].bytes_list.value.__setitem__(2, b"\x00" * 47),
     r"feature steps/observation/mask: step 2 holds 47 bytes, not the 48 of uint8 \[6, 8\]"),
])
def test_bad_content_is_one_error_naming_shard_record_and_feature(tmp_path, change, match):
    folder = _copy(tmp_path)
    _rewrite(_shard(folder), change)
    _store_unchanged_after_failed_ingest(tmp_path, folder, match)


def test_a_zlib_bomb_stops_at_the_declared_size(tmp_path):
    import zlib

    folder = _copy(tmp_path)
    bomb = zlib.compress(b"\x00" * (64 << 20))
    _rewrite(_shard(folder), lambda f: f["steps/observation/depth"].bytes_list.value.__setitem__(0, bomb))
    with pytest.raises(InvalidInput, match=r"step 0 holds 769 bytes, not the 768"):
        list(iter_rlds(folder, SourceOptions(fps=FPS)))


def test_a_missing_shard_and_a_missing_schema_are_named(tmp_path):
    folder = _copy(tmp_path)
    _shard(folder).unlink()
    with pytest.raises(InvalidInput, match=r"tfrecord-00001-of-00002: missing \(dataset_info.json lists 1 episodes"):
        list(iter_rlds(folder, SourceOptions(fps=FPS)))
    (folder / "features.json").unlink()
    with pytest.raises(InvalidInput, match=r"no features.json"):
        RldsDataset(folder)


def test_the_cli_ingests_lists_and_refuses_with_one_line(tmp_path):
    import subprocess

    env_store = str(tmp_path / "store")
    run = lambda *a: subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "--store", env_store, *a],
                                    capture_output=True, text=True, timeout=300)
    listed = run("ingest", "rlds", str(TOY), "--list")
    assert listed.returncode == 0 and "steps/observation/wrist_image" in listed.stdout
    missing_fps = run("ingest", "rlds", str(TOY), "--site", "toy")
    assert missing_fps.returncode != 0 and "Traceback" not in missing_fps.stderr
    assert "pass --fps" in missing_fps.stderr and len(missing_fps.stderr.strip().splitlines()) == 1
    done = run("ingest", "rlds", str(TOY), "--site", "toy", "--fps", "10", "--split", "train", "--slice", "t")
    assert done.returncode == 0, done.stderr
    assert [line.split()[-1] for line in done.stdout.splitlines()[:-1]] == ["toy_rlds/train/episode_000000",
                                                                            "toy_rlds/train/episode_000001"]


def test_a_tensor_declaring_more_than_a_step_may_hold_is_skipped_before_anything_is_allocated(tmp_path):
    folder = _copy(tmp_path)
    doc = json.loads((folder / "features.json").read_text())
    obs = doc["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]["observation"]
    obs["featuresDict"]["features"]["depth"]["tensor"]["shape"]["dimensions"] = ["100000", "100000"]
    (folder / "features.json").write_text(json.dumps(doc))
    from rayform.converters.formats import describe

    [line] = [x for x in describe("rlds", folder) if "steps/observation/depth" in x]
    assert "-> dropped: shape [100000, 100000] (40000000000 bytes a step)" in line
    name, streams, _ = next(iter_rlds(folder, SourceOptions(fps=FPS)))
    assert "observation/depth" not in {s.name for s in streams} and "observation/state" in {s.name for s in streams}
