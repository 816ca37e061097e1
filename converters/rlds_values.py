"""An RLDS episode's values as its Example holds them, decoded and checked against
features.json: how many steps, each tensor (``none``, ``bytes`` or ``zlib`` encoded), each
image's format and size, each text (strings, or UTF-8 codes), and the instruction that becomes
the task (``rlds``)."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import numpy as np

from rayform.codec import imagecodec
from rayform.converters.rlds_features import Feature
from rayform.errors import InvalidInput, Malformed

MAX_META_VALUES = 64  # a metadata tensor of more values is kept as a one-step stream, not in the metadata
MAX_TEXTS = 16  # distinct values of a text feature kept in the metadata


def step_count(example: dict[str, Any], features: list[Feature], what: str) -> int:
    """How many steps the episode has: every step feature must say the same."""
    counts = {}
    for f in features:
        values = example[f.path]
        per = f.size if f.encoding in ("none", "codes") and f.kind != "image" else 1
        if per == 0:
            continue
        if len(values) % per:
            raise InvalidInput(f"{what}, feature {f.path}: {len(values)} values, not a whole number of "
                               f"steps of shape {list(f.shape)}")
        counts[f.path] = len(values) // per
    if not counts:
        raise InvalidInput(f"{what}: no step feature to count its steps by")
    n = max(set(counts.values()), key=list(counts.values()).count)
    for path, c in counts.items():
        if c != n:
            raise InvalidInput(f"{what}, feature {path}: {c} steps where the others have {n}")
    return n


def tensor(f: Feature, values: Any, steps: int, what: str) -> np.ndarray:
    dtype = np.dtype(f.dtype)
    if f.encoding == "none":
        if not isinstance(values, np.ndarray):
            raise InvalidInput(f"{what}: stored as bytes, features.json says {f.dtype} values")
        if dtype.kind in "iub" and values.dtype.kind != "i" or dtype.kind == "f" and values.dtype.kind != "f":
            raise InvalidInput(f"{what}: stored as {values.dtype}, features.json says {f.dtype}")
        if dtype.kind in "iu" and values.size and (values.min() < np.iinfo(dtype).min
                                                   or values.max() > np.iinfo(dtype).max):
            raise InvalidInput(f"{what}: a value out of {f.dtype}'s range")
        return (values != 0 if dtype.kind == "b" else values.astype(dtype)).reshape(steps, *f.shape)
    if not isinstance(values, list):
        raise InvalidInput(f"{what}: stored as numbers, features.json says {f.encoding}-encoded")
    want = f.size * dtype.itemsize
    raw = []
    for k, v in enumerate(values):
        if f.encoding == "zlib":
            d = zlib.decompressobj()
            try:
                v = d.decompress(v, want + 1)  # bounded: a bomb stops at what the shape allows
            except zlib.error as e:
                raise InvalidInput(f"{what}: step {k} is not zlib data ({e})") from None
        if len(v) != want:
            raise InvalidInput(f"{what}: step {k} holds {len(v)} bytes, not the {want} of {f.dtype} {list(f.shape)}")
        raw.append(v)
    flat = np.frombuffer(b"".join(raw), dtype.newbyteorder("<"))  # TFDS writes numpy's bytes, little-endian here
    out: np.ndarray = flat.astype(dtype).reshape(steps, *f.shape)
    return out


def check_image(f: Feature, frames: Any, what: str) -> None:
    """Frames as features.json declares them, or (declaring no format, as older datasets' do)
    JPEG or PNG as the bytes say."""
    if not isinstance(frames, list) or not frames:
        raise InvalidInput(f"{what}: no encoded images")
    found = imagecodec.sniff(frames[0])
    if f.encoding and found != f.encoding:
        raise InvalidInput(f"{what}: step 0 is {found}, features.json says {f.encoding}")
    if found not in ("jpeg", "png"):
        raise InvalidInput(f"{what}: step 0 is neither JPEG nor PNG (features.json states no format)")
    try:
        h, w = imagecodec.dimensions(frames[0], found, what=f"{what}, step 0")
    except Malformed as e:
        raise InvalidInput(str(e)) from None
    if len(f.shape) >= 2 and (f.shape[0], f.shape[1]) != (h, w) and min(f.shape[:2]) > 0:
        raise InvalidInput(f"{what}: step 0 is {w}x{h}, features.json says {f.shape[1]}x{f.shape[0]}")


def texts_of(f: Feature, values: Any, steps: int, what: str) -> list[str]:
    """A text feature's value at each step: strings, or (``encoding == "codes"``, language_table's
    instruction) a tensor of UTF-8 codes a step, zero-padded."""
    if f.encoding != "codes":
        return [text(v, what) for v in values]
    codes = tensor(dataclasses.replace(f, encoding="none"), values, steps, what).reshape(steps, -1)
    if codes.size and (codes.min() < 0 or codes.max() > 255):
        raise InvalidInput(f"{what}: a code out of a byte's range (features.json's text of UTF-8 codes)")
    return [text(row.astype(np.uint8).tobytes().rstrip(b"\0"), what) for row in codes]


def text(value: Any, what: str) -> str:
    if not isinstance(value, bytes):
        raise InvalidInput(f"{what}: stored as numbers, features.json says text")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what}: text that is not UTF-8") from None


def meta_value(f: Feature, values: Any, what: str) -> Any:
    if f.kind == "text":
        texts = texts_of(f, values, 1, what) if f.encoding == "codes" else [text(v, what) for v in values]
        return texts[0] if len(texts) == 1 else texts
    if f.kind != "tensor" or f.size > MAX_META_VALUES:
        return None
    array = tensor(f, values, 1, what)[0]
    return array.tolist()


def texts_into(meta: dict[str, Any], texts: dict[str, list[str]], task_key: str | None) -> None:
    """The instruction (``task_key``'s text) as the task; every text feature's distinct values,
    in order, under ``texts``."""
    distinct = {path: list(dict.fromkeys(v.strip() for v in values if v.strip()))[:MAX_TEXTS]
                for path, values in texts.items()}
    values = distinct.get(task_key or "", [])
    if values:
        meta["task"] = values[0]
        if len(values) > 1:
            meta["instructions"] = values
    if distinct:
        meta["texts"] = distinct
