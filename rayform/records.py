"""Safe byte forms of arrays: npy for stored blobs, msgpack for per-sample records.

Nothing here can run code on read: npy is loaded with ``allow_pickle=False`` and
msgpack is decoded without any ext hooks.
"""

from __future__ import annotations

import io
from typing import Any

import msgpack
import numpy as np

from rayform.errors import IntegrityError


def to_npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def from_npy(data: bytes, what: str = "npy blob") -> np.ndarray:
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as e:  # object arrays, truncated headers
        raise IntegrityError(f"{what}: not a plain npy array ({e})") from e


def pack_array(array: np.ndarray) -> dict[str, Any]:
    """An array as a self-describing msgpack map: dtype string, shape, raw bytes."""
    array = np.ascontiguousarray(array)
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}


def unpack_array(obj: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(obj["dtype"])
    if dtype.hasobject:
        raise IntegrityError(f"record: object dtype {obj['dtype']!r} refused")
    return np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"])


def dumps(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def loads(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=True)
