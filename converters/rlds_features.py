"""The schema of an RLDS dataset: the leaves of TFDS's ``features.json``, what each holds and
how TFDS serializes it, and the stream each becomes (``rlds``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from rayform.errors import InvalidInput
from rayform.recordings.streams import RESERVED

DTYPES = {"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "bool"}
MAX_STEP_BYTES = 256 << 20  # a tensor declaring more a step is skipped (bounded before anything is allocated)
NAME = re.compile(r"[A-Za-z0-9_.\-]{1,200}")  # a feature's, split's or dataset's name as TFDS writes them


@dataclass(frozen=True)
class Feature:
    """One leaf of ``features.json``: where it is, what it holds, how it is serialized."""

    path: str  # "steps/observation/image", "episode_metadata/file_path"
    kind: str  # "image", "tensor" or "text"
    dtype: str  # a numpy dtype name, "string" for text
    shape: tuple[int, ...]  # per step (steps/…) or per episode; -1 where unknown
    # tensors: none, bytes or zlib; images: jpeg, png, or "" (not stated: sniffed from the bytes);
    # text: none, or "codes" (a tensor of UTF-8 codes, zero-padded: language_table's instruction)
    encoding: str
    skip: str | None = None  # why it is not read

    @property
    def step(self) -> bool:
        return self.path.startswith("steps/")

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def parse_features(doc: Any, what: str) -> list[Feature]:
    """The leaves of a TFDS ``features.json`` (FeaturesDict, Dataset/Sequence of ``steps``,
    Tensor, Scalar, Image, Text, ClassLabel); anything else is listed with why it is skipped."""
    out: list[Feature] = []

    def walk(node: Any, path: str, in_steps: bool) -> None:
        if not isinstance(node, dict):
            raise InvalidInput(f"{what}: feature {path or '/'} is not an object")
        kind = str(node.get("pythonClassName", "")).rsplit(".", 1)[-1]
        if "featuresDict" in node:
            for key, child in dict(node["featuresDict"].get("features", {})).items():
                if not NAME.fullmatch(str(key)) or key in (".", ".."):
                    raise InvalidInput(f"{what}: feature name {str(key)[:60]!r} is not one TFDS writes")
                walk(child, f"{path}/{key}" if path else str(key), in_steps)
        elif "sequence" in node:
            if path == "steps" and not in_steps:
                walk(node["sequence"].get("feature", {}), path, True)
            else:
                out.append(Feature(path, "tensor", "", (), "", skip="a sequence inside a step (ragged)"))
        elif "tensor" in node or "image" in node:
            spec = dict(node.get("tensor") or node.get("image") or {})
            dims = tuple(int(d) for d in dict(spec.get("shape") or {}).get("dimensions", []))
            if len(dims) > 8 or any(d < -1 or d > 1 << 31 for d in dims):
                raise ValueError(f"feature {path}: shape {list(dims)[:10]}")
            dtype = str(spec.get("dtype", "uint8"))
            if "image" in node:
                fmt = str(spec.get("encodingFormat") or "")
                skip = None if dtype in ("uint8", "uint16") and fmt in ("jpeg", "png", "") else \
                    f"an image of {dtype} as {fmt} (JPEG or PNG of uint8/uint16 are read)"
                out.append(Feature(path, "image", dtype, dims, fmt, skip))
                return
            encoding = str(spec.get("encoding", "none"))
            skip = None
            if dtype == "string":
                out.append(Feature(path, "text", "string", dims, "none",
                                   None if not dims else "a tensor of strings"))
                return
            if dtype not in DTYPES:
                skip = f"dtype {dtype}"
            elif encoding not in ("none", "bytes", "zlib"):
                skip = f"encoding {encoding}"
            elif any(d < 0 for d in dims):
                skip = f"shape {list(dims)} (a dimension of unknown size)"
            elif math.prod(dims) * np.dtype(dtype).itemsize > MAX_STEP_BYTES:
                skip = f"shape {list(dims)} ({math.prod(dims) * np.dtype(dtype).itemsize} bytes a step)"
            if skip is None and encoding == "none" and len(dims) == 1 and dtype in ("int32", "int64", "uint8") and \
                    "instruction" in path.rsplit("/", 1)[-1]:
                out.append(Feature(path, "text", dtype, dims, "codes"))
                return
            out.append(Feature(path, "tensor", dtype, dims, encoding, skip))
        elif "text" in node or kind == "Text":
            out.append(Feature(path, "text", "string", (), "none"))
        elif "classLabel" in node or kind == "ClassLabel":
            out.append(Feature(path, "tensor", "int64", (), "none"))
        else:
            out.append(Feature(path, "tensor", "", (), "", skip=f"a {kind or 'feature'} feature"))

    try:
        walk(doc, "", False)
    except (TypeError, ValueError, AttributeError, KeyError) as e:  # a features.json TFDS did not write
        raise InvalidInput(f"{what}: not a TFDS features.json ({type(e).__name__}: {str(e)[:120]})") from None
    if not any(f.step for f in out):
        raise InvalidInput(f"{what}: no steps feature (an RLDS dataset's episodes are sequences of steps)")
    return out


def default_stream_name(path: str) -> str:
    name = path.removeprefix("steps/")
    return f"{name}/value" if name in RESERVED else name
