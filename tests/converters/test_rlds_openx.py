"""Open X-Embodiment as it is: datasets TFDS's own writer made with the published feature
dictionaries (``tests/data/rlds/make_openx.py``), ingested, named in TFDS's order, packed without
``--map`` and trained on; every value against what the writer was given, every image against the
bytes TFDS reads back."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rayform
from rayform.converters.rlds import RldsDataset
from rayform.converters.rlds_order import episode_numbers, runs

pytest.importorskip("google.protobuf", reason="the rlds extra (protobuf, google-crc32c) is not installed")
pytest.importorskip("google_crc32c", reason="the rlds extra (protobuf, google-crc32c) is not installed")

DATA = Path(__file__).resolve().parents[1] / "data" / "rlds"
OPENX = DATA / "openx"
EXPECTED = json.loads((DATA / "openx_expected.json").read_text())
FOLDERS = {"fractal20220817_data": OPENX / "fractal20220817_data" / "0.1.0", "bridge": OPENX / "bridge" / "0.1.0",
           "droid": OPENX / "droid" / "1.0.1", "language_table": OPENX / "language_table" / "0.0.1",
           "roboturk": OPENX / "roboturk" / "0.1.0",
           "array_record/language_table": OPENX / "array_record" / "language_table" / "0.0.1"}


@pytest.fixture(scope="module")
def given():
    with np.load(DATA / "openx_expected.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    client = rayform.Client(tmp_path_factory.mktemp("openx") / "store")
    slices = {}
    for key, folder in FOLDERS.items():
        if key.startswith("array_record"):
            pytest.importorskip("array_record", reason="the rlds extra's array-record is not installed")
        site = key.replace("/", "-").replace("_", "-")
        options = {"fps": 10.0} if key == "roboturk" else {}  # the others' rates are known
        report = client.ingest("rlds", [folder], site, options=options, slice_name=site, workers=2, progress=False)
        slices[key] = report.slice
    return client, slices


def _segments(client, s):
    """The slice's segments by episode number."""
    found = [client.segments.get(x.id) for x in s.segments]
    return {int(seg.name.rsplit("_", 1)[1]): seg for seg in found}


@pytest.mark.parametrize("key", list(FOLDERS))
def test_episodes_are_named_in_tfds_order_and_every_value_is_exact(ingested, given, key):
    client, slices = ingested
    dataset = key.rsplit("/", 1)[-1]
    expected = EXPECTED[key]
    segments = _segments(client, slices[key])
    assert sorted(segments) == list(range(len(expected["order"])))
    for number, index in enumerate(expected["order"]):  # episode N is the N-th TFDS yields
        seg = segments[number]
        for path, digests in expected["images"][number].items():
            stream = path.removeprefix("steps/")
            got = [hashlib.sha256(bytes(seg.frame_view(stream, k))).hexdigest() for k in range(len(digests))]
            assert got == digests, (key, number, path)
        for name, values in given.items():
            d, i, path = name.split("/", 2)
            if d != dataset or int(i) != index:
                continue
            feature = path.removeprefix("steps/")
            if feature.endswith("instruction") and values.dtype.kind in "iu":  # language_table's codes: the task
                continue
            stream = {"action": "action/value"}.get(feature, feature)
            recorded = seg.values(stream)
            if values.dtype == np.float64:  # TFDS writes a float64 tensor as a tf.train.FloatList (float32)
                values = values.astype(np.float32).astype(np.float64)
            assert np.array_equal(recorded, values.reshape(recorded.shape)) and recorded.dtype == values.dtype, \
                (key, number, stream)
        assert seg.meta["task"] == f"move the block to the corner {index}"
        assert (seg.meta["shard"], seg.meta["episode_index"]) == (seg.meta["shard"], number)


def test_the_interleave_is_tfds_own_over_more_shards_than_its_cycle(tmp_path):
    """19 shards of 20: TFDS's blocks of 16 across a cycle of 16 shards, refilled as they end."""
    ds = RldsDataset(OPENX / "interleave_order" / "1.0.0", fps=10.0)
    shards = ds.shards()
    assert len(shards) == 19 and not ds.sequential
    client = rayform.Client(tmp_path / "store")
    report = client.ingest("rlds", [OPENX / "interleave_order" / "1.0.0"], "order", options={"fps": 10.0},
                           slice_name="order", workers=2, progress=False)
    got = _segments(client, report.slice)
    for number, index in enumerate(EXPECTED["interleave_order"]["order"]):
        values = got[number].values("observation/index")
        assert int(values[0]) == index, number


def test_the_interleave_rule_on_shards_of_any_length():
    # a shard of exactly a block, an empty one, short ones: every record once, blocks of 16 at most
    lengths = [16, 0, 40, 3, 17, 1, 33] + [5] * 14
    numbers = episode_numbers(tuple(lengths))
    assert sorted(np.concatenate(numbers).tolist()) == list(range(sum(lengths)))
    assert all(count <= 16 for _, _, count in runs(lengths))
    assert [n.tolist() for n in episode_numbers(tuple(lengths), sequential=True)] == \
        [list(range(sum(lengths[:i]), sum(lengths[:i + 1]))) for i in range(len(lengths))]


def test_language_tables_code_instruction_is_the_task_and_no_stream(ingested):
    client, slices = ingested
    seg = client.segments.get(slices["language_table"].segments[0].id)
    assert seg.task.startswith("move the block to the corner ")
    assert "observation/instruction" not in seg.streams
    assert seg.meta["task"].startswith("move the block to the corner ")


def test_an_image_declared_without_a_format_keeps_each_frame_as_recorded(ingested):
    client, slices = ingested
    features = json.loads((FOLDERS["roboturk"] / "features.json").read_text())
    assert "encodingFormat" not in json.dumps(features)
    segments = _segments(client, slices["roboturk"])
    formats = {bytes(seg.frame_view("observation/front_rgb", k))[:2] for seg in segments.values() for k in range(3)}
    assert formats == {b"\xff\xd8", b"\x89P"}  # JPEG frames, and the one PNG frame, as TFDS stored them


@pytest.mark.parametrize("key, action, fps", [("fractal20220817_data", "action/rotation_delta", 3.0),
                                              ("droid", "action_dict/joint_position", 15.0),
                                              ("bridge", "action/world_vector", 5.0)])
def test_action_chunks_are_the_recorded_steps_bit_for_bit(ingested, given, key, action, fps):
    client, slices = ingested
    s = slices[key]
    horizon = EXPECTED[key]["steps"] - 1
    client.pack(s, fps, workers=1, progress=False)  # no --map: recorded x_delta names are their own
    ds = rayform.torch.EpisodeDataset(s, obs=[action], action=action, fps=fps, horizon=horizon)
    order = EXPECTED[key]["order"]
    names = {seg.id: number for number, seg in _segments(client, s).items()}
    for j in range(len(ds)):
        sample = ds[j]
        values = given[f"{key}/{order[names[sample['meta']['segment']]]}/steps/{action}"]
        k = round(int(sample["t_ns"]) * fps / 1e9)
        want = values[np.minimum(np.arange(k + 1, k + horizon + 1), len(values) - 1)]
        assert np.array_equal(sample["action"].numpy(), want.astype(np.float32)), (j, k)
        assert np.array_equal(sample[action].numpy(), values[k].astype(np.float32))


def test_an_rt1_slice_trains_through_the_readme_snippet_with_two_workers(ingested):
    import torch

    client, slices = ingested
    s = slices["fractal20220817_data"]
    client.pack(s, 3.0, workers=1, progress=False)
    dataset = rayform.torch.EpisodeDataset(s, obs=["observation/image", "observation/base_pose_tool_reached"],
                                           action=["action/world_vector", "action/rotation_delta"], fps=3.0,
                                           horizon=2)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=2, shuffle=True,
                                         multiprocessing_context="fork")
    seen = 0
    for batch in loader:
        assert batch["observation/image"].shape[1:] == (3, 256, 320)
        assert batch["action"].shape[1:] == (2, 6)
        seen += len(batch["action"])
    assert seen == len(dataset) > 0


def test_list_says_where_each_feature_goes_and_the_cli_takes_source_options(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", "--store", str(tmp_path / "s"),
                                     *a], capture_output=True, text=True, timeout=300)
    listed = run("ingest", "rlds", str(FOLDERS["language_table"]), "--list")
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in listed.stdout.splitlines() if "steps/observation/instruction" in x)
    assert "text codes" in line and "-> task" in line
    assert "TFDS's interleaved order" in listed.stdout.splitlines()[0]
    unreachable = run("ingest", "rlds", "s3://bucket/language_table/0.0.1", "--list", "--source-option",
                      "endpoint_url=http://127.0.0.1:9", "--source-option", "anon=true",
                      "--source-option", "config_kwargs={\"retries\": {\"max_attempts\": 1}}")
    assert unreachable.returncode != 0 and "Traceback" not in unreachable.stderr
    assert len(unreachable.stderr.strip().splitlines()) == 1 and "cannot reach dataset_info.json" in unreachable.stderr


def test_a_metadata_tensor_too_large_for_the_catalog_is_kept_as_a_one_step_stream():
    from rayform.converters.rlds_features import Feature
    from rayform.converters.tfrecord import parse_example, records

    folder = FOLDERS["fractal20220817_data"]
    ds = RldsDataset(folder)
    big = Feature("episode_metadata/embedding", "tensor", "float32", (100,), "none")
    ds.features.append(big)
    ds.large_meta.append(big)
    shard = ds.shards()[0]
    with open(shard.path, "rb") as f:
        example = parse_example(next(records(f, shard.path.stat().st_size, "shard"))[0], "record 0")
    example[big.path] = np.arange(100, dtype=np.float32)
    streams, meta = ds.episode(example, 3.0, "record 0", {})
    [kept] = [s for s in streams if s.name == "episode_metadata/embedding"]
    assert np.array_equal(kept.values, np.arange(100, dtype=np.float32)[None]) and len(kept.timestamps) == 1
    assert "embedding" not in meta.get("episode_metadata", {})


def test_the_task_key_chooses_among_instructions_and_a_wrong_one_is_named(tmp_path):
    from rayform.errors import InvalidInput

    ds = RldsDataset(FOLDERS["droid"], task_key="language_instruction_3")
    assert ds.task_key == "language_instruction_3" and RldsDataset(FOLDERS["droid"]).task_key == "language_instruction"
    with pytest.raises(InvalidInput, match="--task-key 'steps/nope'.*language_instruction_2"):
        RldsDataset(FOLDERS["droid"], task_key="steps/nope")


def test_a_damaged_array_record_shard_is_refused_and_the_store_unchanged(tmp_path):
    import shutil

    from rayform.errors import InvalidInput

    pytest.importorskip("array_record", reason="the rlds extra's array-record is not installed")
    folder = tmp_path / "language_table" / "0.0.1"
    shutil.copytree(FOLDERS["array_record/language_table"], folder)
    shard = next(folder.glob("*.array_record-00001-of-00002"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    client = rayform.Client(tmp_path / "store")
    with pytest.raises(InvalidInput, match="array_record-00001-of-00002"):
        client.ingest("rlds", [folder], "lt", workers=1, progress=False)
    assert client.segments.list() == []


def test_source_json_is_bounded_in_size_and_depth(tmp_path, monkeypatch):
    import shutil

    from rayform.converters import source_files
    from rayform.errors import InvalidInput

    folder = tmp_path / "droid" / "1.0.1"
    shutil.copytree(FOLDERS["droid"], folder)
    monkeypatch.setattr(source_files, "MAX_TEXT_BYTES", 1000)
    with pytest.raises(InvalidInput, match="json: larger than the 1000 B"):
        RldsDataset(folder)
    monkeypatch.undo()
    (folder / "features.json").write_text('{"featuresDict": ' * 70 + "{}" + "}" * 70)
    with pytest.raises(InvalidInput, match="features.json: JSON nested deeper than 64"):
        RldsDataset(folder)
