"""An RLDS dataset of real camera frames in TFDS's folder layout, for the ingest benchmark.

TFDS's own writer needs TensorFlow; the tests' dataset was made with it
(``tests/data/rlds/make_rlds.py``). For a benchmark of hundreds of episodes this writes the
same layout directly: ``tf.train.Example`` records (the message rayform parses with, so the
bytes are what TFDS writes: the same fields, flattened the same way), framed with TFRecord's
masked CRC32C, ``features.json`` and ``dataset_info.json`` as TFDS writes them. Two 224x224
cameras as JPEG q90 (the LeRobot examples' frames), 6 joints of state and action, the RLDS
flags and a language instruction a step.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from rayform.codec import imagecodec
from rayform.converters.tfrecord import _example_class, masked_crc

NAME = "bench_rlds"


def _tensor(shape: list[int], dtype: str) -> dict:
    cls = "scalar.Scalar" if not shape else "tensor_feature.Tensor"
    return {"pythonClassName": f"tensorflow_datasets.core.features.{cls}",
            "tensor": {"dtype": dtype, "encoding": "none", "shape": {"dimensions": [str(d) for d in shape]}
                       if shape else {}}}


def _image(size: int) -> dict:
    return {"pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
            "image": {"dtype": "uint8", "encodingFormat": "jpeg", "shape": {"dimensions": [str(size), str(size), "3"]}}}


def _dict(features: dict) -> dict:
    return {"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
            "featuresDict": {"features": features}}


TEXT = {"pythonClassName": "tensorflow_datasets.core.features.text_feature.Text", "text": {}}


def write(folder: Path, frames: np.ndarray, episodes: int, steps: int, shards: int) -> int:
    """Write the dataset into ``folder`` (``<name>/1.0.0``); returns its bytes."""
    size = frames.shape[1]
    root = folder / NAME / "1.0.0"
    root.mkdir(parents=True)
    features = _dict({
        "steps": {"pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
                  "sequence": {"feature": _dict({
                      "observation": _dict({"image": _image(size), "wrist_image": _image(size),
                                            "state": _tensor([6], "float32")}),
                      "action": _tensor([6], "float32"), "reward": _tensor([], "float32"),
                      "discount": _tensor([], "float32"), "is_first": _tensor([], "bool"),
                      "is_last": _tensor([], "bool"), "is_terminal": _tensor([], "bool"),
                      "language_instruction": TEXT}), "length": "-1"}},
        "episode_metadata": _dict({"file_path": TEXT}),
    })
    (root / "features.json").write_text(json.dumps(features, indent=4))
    jpegs = [imagecodec.encode_jpeg(f, 90) for f in frames]
    rng = np.random.default_rng(0)
    Example = _example_class()
    per = -(-episodes // shards)
    lengths, total = [], 0
    for s in range(shards):
        count = min(per, episodes - s * per)
        out = bytearray()
        for e in range(s * per, s * per + count):
            first = (e * steps) % max(1, len(jpegs) - steps)
            ex = Example()
            f = ex.features.feature
            # an episode longer than the frames there are goes round them again
            f["steps/observation/image"].bytes_list.value.extend(jpegs[(first + k) % len(jpegs)] for k in range(steps))
            f["steps/observation/wrist_image"].bytes_list.value.extend(
                jpegs[(first + k + 1) % len(jpegs)] for k in range(steps))
            f["steps/observation/state"].float_list.value.extend(rng.normal(size=steps * 6).astype(np.float32))
            f["steps/action"].float_list.value.extend(rng.normal(size=steps * 6).astype(np.float32))
            f["steps/reward"].float_list.value.extend([0.0] * (steps - 1) + [1.0])
            f["steps/discount"].float_list.value.extend([1.0] * steps)
            f["steps/is_first"].int64_list.value.extend([1] + [0] * (steps - 1))
            f["steps/is_last"].int64_list.value.extend([0] * (steps - 1) + [1])
            f["steps/is_terminal"].int64_list.value.extend([0] * (steps - 1) + [1])
            f["steps/language_instruction"].bytes_list.value.extend([b"put the cube in the bowl"] * steps)
            f["episode_metadata/file_path"].bytes_list.value.append(f"/raw/episode_{e}.h5".encode())
            body = ex.SerializeToString()
            head = struct.pack("<Q", len(body))
            out += head + struct.pack("<I", masked_crc(head)) + body + struct.pack("<I", masked_crc(body))
        (root / f"{NAME}-train.tfrecord-{s:05d}-of-{shards:05d}").write_bytes(bytes(out))
        lengths.append(str(count))
        total += len(out)
    info = {"fileFormat": "tfrecord", "name": NAME, "version": "1.0.0",
            "splits": [{"filepathTemplate": "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}", "name": "train",
                        "numBytes": str(total), "shardLengths": lengths}]}
    (root / "dataset_info.json").write_text(json.dumps(info, indent=2))
    return total


TF_READ = """
import sys, time
import tensorflow as tf
files = sys.argv[1:]
t0 = time.perf_counter()
n = 0
for raw in tf.data.TFRecordDataset(files):
    ex = tf.train.Example.FromString(raw.numpy())
    n += len(ex.features.feature["steps/observation/image"].bytes_list.value)
print(time.perf_counter() - t0, n)
"""
