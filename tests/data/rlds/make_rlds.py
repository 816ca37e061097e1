"""Writes the RLDS test datasets under this folder with TensorFlow Datasets' own writer.

Run in a throwaway environment (the tests read the files without TensorFlow):

    python -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu tensorflow-datasets   # the tfds-writer extra
    /tmp/tfenv/bin/python tests/data/rlds/make_rlds.py

It writes ``toy_rlds/1.0.0/`` (a TFDS dataset folder as Open-X ships them: dataset_info.json,
features.json, ``toy_rlds-<split>.tfrecord-NNNNN-of-MMMMM``; each split in two shards)
and ``expected.npz`` / ``expected.json``: every value given to the writer, and the sha256 of each
encoded image as TensorFlow reads it back (``SkipDecoding``), so the tests check rayform's reader
against TFDS's own.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

HERE = Path(__file__).resolve().parent
EPISODES = {"train": [5, 7], "val": [6, 4]}  # steps an episode
INSTRUCTIONS = ["pick up the red block", "open the drawer", "put the spoon in the bowl", "wipe the table"]


def _image(rng: np.random.Generator, h: int, w: int, k: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 4 + k * 9) % 256, (y * 5 + k * 3) % 256, ((x + y) * 2 + k * 17) % 256], -1)
    return np.clip(base + rng.integers(-2, 3, base.shape), 0, 255).astype(np.uint8)


def episodes(split: str) -> list[dict]:
    rng = np.random.default_rng({"train": 0, "val": 1}[split])
    out = []
    for e, n in enumerate(EPISODES[split]):
        index = e + (0 if split == "train" else len(EPISODES["train"]))
        instruction = INSTRUCTIONS[index]
        steps = []
        for k in range(n):
            steps.append({
                "observation": {
                    "image": _image(rng, 48, 64, k + 10 * index),
                    "wrist_image": _image(rng, 24, 32, k + 7 * index),
                    "state": rng.normal(size=7).astype(np.float32),
                    "gripper_closed": np.int64(k % 2),
                    "depth": rng.uniform(0.2, 3.0, (12, 16)).astype(np.float32),
                    "joints_f64": rng.normal(size=3),
                    "mask": rng.integers(0, 255, (6, 8), dtype=np.uint8),
                },
                "action": rng.normal(size=7).astype(np.float32),
                "reward": np.float32(1.0 if k == n - 1 else 0.0),
                "discount": np.float32(1.0),
                "is_first": k == 0,
                "is_last": k == n - 1,
                "is_terminal": k == n - 1 and index != 1,
                # the second episode's instruction changes half way, as relabelled data's can
                "language_instruction": instruction if index != 1 or k < n // 2 else "close the drawer",
            })
        out.append({"steps": steps, "episode_metadata": {"file_path": f"/data/raw/{split}/episode_{e}.h5",
                                                          "episode_id": np.int64(100 + index)}})
    return out


class ToyRlds(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "steps": tfds.features.Dataset({
                "observation": tfds.features.FeaturesDict({
                    "image": tfds.features.Image(shape=(48, 64, 3), dtype=np.uint8, encoding_format="jpeg"),
                    "wrist_image": tfds.features.Image(shape=(24, 32, 3), dtype=np.uint8, encoding_format="png"),
                    "state": tfds.features.Tensor(shape=(7,), dtype=np.float32),
                    "gripper_closed": tfds.features.Scalar(dtype=np.int64),
                    "depth": tfds.features.Tensor(shape=(12, 16), dtype=np.float32,
                                                  encoding=tfds.features.Encoding.ZLIB),
                    "joints_f64": tfds.features.Tensor(shape=(3,), dtype=np.float64),
                    "mask": tfds.features.Tensor(shape=(6, 8), dtype=np.uint8, encoding=tfds.features.Encoding.BYTES),
                }),
                "action": tfds.features.Tensor(shape=(7,), dtype=np.float32),
                "reward": tfds.features.Scalar(dtype=np.float32),
                "discount": tfds.features.Scalar(dtype=np.float32),
                "is_first": tfds.features.Scalar(dtype=np.bool_),
                "is_last": tfds.features.Scalar(dtype=np.bool_),
                "is_terminal": tfds.features.Scalar(dtype=np.bool_),
                "language_instruction": tfds.features.Text(),
            }),
            "episode_metadata": tfds.features.FeaturesDict({
                "file_path": tfds.features.Text(),
                "episode_id": tfds.features.Scalar(dtype=np.int64),
            }),
        }))

    def _split_generators(self, dl_manager):
        return {split: self._generate_examples(split) for split in EPISODES}

    def _generate_examples(self, split):
        for e, episode in enumerate(episodes(split)):
            yield f"{split}-{e}", episode


def main() -> None:
    work = HERE / "_build"
    shutil.rmtree(work, ignore_errors=True)
    builder = ToyRlds(data_dir=str(work))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=2))
    written = Path(builder.data_dir)
    print("written", written, sorted(p.name for p in written.iterdir()))
    target = HERE / "toy_rlds" / "1.0.0"
    shutil.rmtree(HERE / "toy_rlds", ignore_errors=True)
    shutil.copytree(written, target)
    shutil.rmtree(work)

    # what TFDS itself reads back: the encoded images' digests, in each split's order
    read = tfds.builder_from_directory(str(target))
    skip = {"steps": {"observation": {"image": tfds.decode.SkipDecoding(),
                                      "wrist_image": tfds.decode.SkipDecoding()}}}
    expected: dict = {"splits": {}}
    arrays: dict[str, np.ndarray] = {}
    for split in EPISODES:
        given = episodes(split)
        listed = []
        for e, ep in enumerate(read.as_dataset(split=split, decoders=skip, shuffle_files=False)):
            key = int(ep["episode_metadata"]["episode_id"].numpy())
            g = next(x for x in given if int(x["episode_metadata"]["episode_id"]) == key)
            steps = list(ep["steps"])
            listed.append({
                "episode_id": key,
                "file_path": g["episode_metadata"]["file_path"],
                "steps": len(steps),
                "language_instruction": [s["language_instruction"] for s in g["steps"]],
                "is_first": [bool(s["is_first"]) for s in g["steps"]],
                "is_last": [bool(s["is_last"]) for s in g["steps"]],
                "is_terminal": [bool(s["is_terminal"]) for s in g["steps"]],
                "image_sha256": [hashlib.sha256(s["observation"]["image"].numpy()).hexdigest() for s in steps],
                "wrist_image_sha256": [hashlib.sha256(s["observation"]["wrist_image"].numpy()).hexdigest()
                                       for s in steps],
            })
            for name in ("state", "depth", "joints_f64", "mask"):
                arrays[f"{key}/observation/{name}"] = np.stack([s["observation"][name] for s in g["steps"]])
            arrays[f"{key}/observation/gripper_closed"] = np.array([s["observation"]["gripper_closed"]
                                                                    for s in g["steps"]])
            for name in ("action", "reward", "discount"):
                arrays[f"{key}/{name}"] = np.stack([s[name] for s in g["steps"]])
            arrays[f"{key}/observation/image"] = np.stack([s["observation"]["image"] for s in g["steps"]])
            arrays[f"{key}/observation/wrist_image"] = np.stack([s["observation"]["wrist_image"]
                                                                 for s in g["steps"]])
        expected["splits"][split] = listed
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    np.savez_compressed(HERE / "expected.npz", **arrays)
    print(json.dumps({s: [e["episode_id"] for e in v] for s, v in expected["splits"].items()}))


if __name__ == "__main__":
    main()
