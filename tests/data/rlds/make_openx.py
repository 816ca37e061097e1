"""Writes RLDS datasets with the feature dictionaries Open X-Embodiment publishes, with TensorFlow
Datasets' own writer, and what TFDS reads back from them (their order, every image's digest).

Run in a throwaway environment (the tests read the files without TensorFlow):

    python -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu tensorflow-datasets array-record pillow
    /tmp/tfenv/bin/python tests/data/rlds/make_openx.py

Under ``openx/`` it writes, each as ``<name>/<version>/`` (dataset_info.json, features.json, shards):

- ``fractal20220817_data`` (RT-1), ``bridge`` (Open-X's BridgeData), ``droid`` and ``language_table``
  with the features of their published ``features.json`` (TFDS catalog, Open-X release): shapes,
  dtypes, encodings and image formats as published; two shards of 17 episodes each (more than
  TFDS's interleave block of 16), a few steps an episode, flat-colour frames (small files);
- ``roboturk``: its published form, an ``Image`` without ``encodingFormat``, holding JPEG frames
  (and one PNG frame, which TFDS stores as given);
- ``array_record/language_table``: the same dataset as ``language_table`` in ``array_record`` shards;
- ``interleave_order``: 19 shards of 20 one-step episodes (more shards than TFDS's cycle of 16).

``openx_expected.json``: per dataset and split, the episodes in the order
``builder_from_directory(...).as_dataset(split, shuffle_files=False)`` yields them (each as the
index the generator gave it) and the sha256 of every image as TFDS reads it back (SkipDecoding);
``openx_expected.npz``: every tensor value given to the writer, ``<dataset>/<index>/<feature path>``.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image as PILImage

F = tfds.features
HERE = Path(__file__).resolve().parent
OUT = HERE / "openx"
EPISODES, SHARDS = 34, 2


def tensor(*shape: int, dtype=np.float32, encoding=None) -> F.Tensor:
    return F.Tensor(shape=shape, dtype=dtype, **({"encoding": encoding} if encoding else {}))


def scalar(dtype=np.float32) -> F.Scalar:
    return F.Scalar(dtype=dtype)


def string() -> F.Tensor:
    return F.Tensor(shape=(), dtype=np.str_)


def image(h: int, w: int, fmt: str | None = "jpeg") -> F.Image:
    return F.Image(shape=(h, w, 3), dtype=np.uint8, encoding_format=fmt)


FLAGS = {"is_first": scalar(np.bool_), "is_last": scalar(np.bool_), "is_terminal": scalar(np.bool_)}

# The published feature dictionaries (each dataset's features.json in the Open-X release).
SCHEMAS = {
    "fractal20220817_data": ("0.1.0", 3, F.FeaturesDict({"steps": F.Dataset({
        "action": F.FeaturesDict({
            "base_displacement_vector": tensor(2), "base_displacement_vertical_rotation": tensor(1),
            "gripper_closedness_action": tensor(1), "rotation_delta": tensor(3),
            "terminate_episode": tensor(3, dtype=np.int32), "world_vector": tensor(3)}),
        **FLAGS,
        "observation": F.FeaturesDict({
            "base_pose_tool_reached": tensor(7), "gripper_closed": tensor(1), "gripper_closedness_commanded": tensor(1),
            "height_to_bottom": tensor(1), "image": image(256, 320), "natural_language_embedding": tensor(512),
            "natural_language_instruction": string(), "orientation_box": tensor(2, 3), "orientation_start": tensor(4),
            "robot_orientation_positions_box": tensor(3, 3), "rotation_delta_to_go": tensor(3),
            "src_rotation": tensor(4), "vector_to_go": tensor(3), "workspace_bounds": tensor(3, 3)}),
        "reward": scalar(),
    })})),
    "bridge": ("0.1.0", 3, F.FeaturesDict({"steps": F.Dataset({
        "action": F.FeaturesDict({"open_gripper": scalar(np.bool_), "rotation_delta": tensor(3),
                                  "terminate_episode": scalar(), "world_vector": tensor(3)}),
        **FLAGS,
        "observation": F.FeaturesDict({"image": image(480, 640), "natural_language_embedding": tensor(512),
                                       "natural_language_instruction": string(), "state": tensor(7)}),
        "reward": scalar(),
    })})),
    "droid": ("1.0.1", 3, F.FeaturesDict({
        "episode_metadata": F.FeaturesDict({"file_path": F.Text(), "recording_folderpath": F.Text()}),
        "steps": F.Dataset({
            "action": tensor(7, dtype=np.float64),
            "action_dict": F.FeaturesDict({
                "cartesian_position": tensor(6, dtype=np.float64), "cartesian_velocity": tensor(6, dtype=np.float64),
                "gripper_position": tensor(1, dtype=np.float64), "gripper_velocity": tensor(1, dtype=np.float64),
                "joint_position": tensor(7, dtype=np.float64), "joint_velocity": tensor(7, dtype=np.float64)}),
            "discount": scalar(), **FLAGS,
            "language_instruction": F.Text(), "language_instruction_2": F.Text(), "language_instruction_3": F.Text(),
            "observation": F.FeaturesDict({
                "cartesian_position": tensor(6, dtype=np.float64), "exterior_image_1_left": image(180, 320),
                "exterior_image_2_left": image(180, 320), "gripper_position": tensor(1, dtype=np.float64),
                "joint_position": tensor(7, dtype=np.float64), "wrist_image_left": image(180, 320)}),
            "reward": scalar(),
        })})),
    "language_table": ("0.0.1", 3, F.FeaturesDict({"steps": F.Dataset({
        "action": tensor(2), **FLAGS,
        "observation": F.FeaturesDict({"effector_target_translation": tensor(2), "effector_translation": tensor(2),
                                       "instruction": tensor(512, dtype=np.int32), "rgb": image(360, 640)}),
        "reward": scalar(),
    })})),
    "roboturk": ("0.1.0", 3, F.FeaturesDict({"steps": F.Dataset({
        "action": F.FeaturesDict({"gripper_closedness_action": tensor(1), "rotation_delta": tensor(3),
                                  "terminate_episode": scalar(), "world_vector": tensor(3)}),
        **FLAGS,
        "observation": F.FeaturesDict({"front_rgb": image(480, 640, None), "natural_language_embedding": tensor(512),
                                       "natural_language_instruction": string()}),
        "reward": scalar(),
    })})),
    "interleave_order": ("1.0.0", 1, F.FeaturesDict({"steps": F.Dataset({
        "observation": F.FeaturesDict({"index": scalar(np.int64)}), "language_instruction": F.Text(), **FLAGS,
    })})),
}
COUNTS = {"interleave_order": (19 * 20, 19), "roboturk": (6, 1)}


def _frame(h: int, w: int, value: int, fmt: str) -> bytes:
    """A flat-coloured frame, encoded (small files; rayform keeps the bytes as they are)."""
    buffer = io.BytesIO()
    PILImage.fromarray(np.full((h, w, 3), (value * 37 % 256, value * 91 % 256, value * 13 % 256), np.uint8)).save(
        buffer, format="JPEG" if fmt == "jpeg" else "PNG", **({"quality": 30} if fmt == "jpeg" else {}))
    return buffer.getvalue()


def _instruction(index: int) -> str:
    return f"move the block to the corner {index}"


def _values(feature, path: str, index: int, step: int, steps: int, rng) -> object:
    """A value for one leaf of a step (or of the episode's metadata)."""
    leaf = path.rsplit("/", 1)[-1]
    if isinstance(feature, F.Image):
        h, w, _ = feature.shape
        fmt = feature.encoding_format or ("png" if (index, step) == (0, 1) else "jpeg")
        return io.BytesIO(_frame(h, w, 7 * index + step + len(path), fmt))
    if isinstance(feature, F.Text) or getattr(feature, "dtype", None) in (np.str_, np.object_) or \
            str(getattr(feature, "dtype", "")) == "<dtype: 'string'>":
        if "instruction" in leaf:
            return _instruction(index) if not leaf.endswith(("_2", "_3")) else ""
        return f"/data/{path}/{index}"
    dtype = np.dtype(feature.np_dtype)
    if leaf in FLAGS:
        return {"is_first": step == 0, "is_last": step == steps - 1, "is_terminal": step == steps - 1}[leaf]
    if leaf == "index":
        return np.int64(index)
    if leaf == "instruction":  # language_table: the instruction's UTF-8 codes, zero-padded
        codes = np.zeros(512, np.int32)
        text = _instruction(index).encode()
        codes[: len(text)] = np.frombuffer(text, np.uint8)
        return codes
    if leaf == "natural_language_embedding":  # one per instruction, as the published ones
        return np.random.default_rng(index).normal(size=feature.shape).astype(dtype)
    if dtype == np.bool_:
        return np.bool_(rng.integers(0, 2))
    if dtype.kind in "iu":
        return rng.integers(0, 3, size=feature.shape).astype(dtype) if feature.shape else dtype.type(rng.integers(0, 3))
    return rng.normal(size=feature.shape).astype(dtype) if feature.shape else dtype.type(rng.normal())


def _fill(node, path: str, index: int, step: int, steps: int, rng) -> object:
    if isinstance(node, F.FeaturesDict):
        return {k: _fill(v, f"{path}/{k}" if path else k, index, step, steps, rng) for k, v in node.items()}
    return _values(node, path, index, step, steps, rng)


def episode(name: str, index: int) -> dict:
    _, steps, schema = SCHEMAS[name]
    rng = np.random.default_rng(1000 + index)
    out = {}
    for key, node in schema.items():
        if key == "steps":
            out["steps"] = [_fill(node.feature, "steps", index, k, steps, rng) for k in range(steps)]
        else:
            out[key] = _fill(node, key, index, 0, 1, rng)
    return out


def builder_for(name: str, data_dir: Path, file_format: str = "tfrecord"):
    version, _, schema = SCHEMAS[name]
    episodes = COUNTS.get(name, (EPISODES, SHARDS))[0]

    dataset_name = name

    class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        name = dataset_name
        VERSION = tfds.core.Version(version)

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=schema)

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for index in range(episodes):
                yield f"episode-{index}", episode(name, index)

    return Builder(data_dir=str(data_dir), file_format=file_format)


def _leaves(node, path: str):
    if isinstance(node, (dict, F.FeaturesDict)):
        for k, v in node.items():
            yield from _leaves(v, f"{path}/{k}" if path else k)
    else:
        yield path, node


def _bytes(value) -> bytes:
    value = value.numpy() if hasattr(value, "numpy") else value
    return value if isinstance(value, bytes) else np.asarray(value).item()


def _steps_of(episode: dict) -> list[dict]:
    """A data source's episode (its steps as stacked arrays) as one dict of leaves a step."""
    steps = episode["steps"]  # a sequence of steps, each a dict
    return [dict(_leaves(steps[k], "steps")) for k in range(len(steps))]


def write(name: str, target: Path, file_format: str = "tfrecord") -> dict:
    work = HERE / "_build"
    shutil.rmtree(work, ignore_errors=True)
    shards = COUNTS.get(name, (EPISODES, SHARDS))[1]
    builder = builder_for(name, work, file_format)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=shards))
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(builder.data_dir, target)
    shutil.rmtree(work)
    read = tfds.builder_from_directory(str(target))
    images = [p for p, f in _leaves(read.info.features["steps"].feature, "steps") if isinstance(f, F.Image)]
    skip = {"steps": {}}
    for p in images:
        node = skip["steps"]
        parts = p.split("/")[1:]
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = tfds.decode.SkipDecoding()
    order, digests = [], []
    if file_format == "array_record":  # TFDS reads these only as a data source: index order
        source = read.as_data_source(split="train", decoders=skip)
        episodes = [_steps_of(source[i]) for i in range(len(source))]
    else:
        episodes = [[dict(_leaves(s, "steps")) for s in ep["steps"]]
                    for ep in read.as_dataset(split="train", decoders=skip, shuffle_files=False)]
    for steps in episodes:
        first = steps[0]
        if "steps/observation/index" in first:
            index = int(np.asarray(first["steps/observation/index"]))
        else:
            text = next(v for p, v in first.items() if p.endswith(("natural_language_instruction", "language_instruction",
                                                                   "observation/instruction")))
            raw = np.asarray(text)
            raw = raw.astype(np.uint8).tobytes().rstrip(b"\0").decode() if raw.dtype.kind in "iu" else raw.item().decode()
            if p := "".join(ch for ch in raw.rsplit(" ", 1)[-1] if ch.isdigit()):
                index = int(p)
            else:
                raise SystemExit(f"{name}: cannot tell an episode's index from {raw!r}")
        order.append(index)
        digests.append({p: [hashlib.sha256(_bytes(s[p])).hexdigest() for s in steps] for p in images})
    return {"order": order, "images": digests, "format": file_format, "steps": SCHEMAS[name][1]}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    expected: dict = {}
    arrays: dict[str, np.ndarray] = {}
    for name in SCHEMAS:
        version = SCHEMAS[name][0]
        expected[name] = write(name, OUT / name / version)
        for index in range(COUNTS.get(name, (EPISODES, SHARDS))[0]):
            given = episode(name, index)
            for path, _ in _leaves(given["steps"][0], "steps"):
                values = [dict(_leaves(s, "steps"))[path] for s in given["steps"]]
                if isinstance(values[0], (io.BytesIO, str)):
                    continue
                arrays[f"{name}/{index}/{path}"] = np.stack([np.asarray(v) for v in values])
        print(name, expected[name]["order"][:20])
    expected["array_record/language_table"] = write("language_table", OUT / "array_record" / "language_table" /
                                                    SCHEMAS["language_table"][0], "array_record")
    (HERE / "openx_expected.json").write_text(json.dumps(expected, indent=0) + "\n")
    np.savez_compressed(HERE / "openx_expected.npz", **arrays)


if __name__ == "__main__":
    main()
