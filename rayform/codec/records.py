"""Safe byte forms of arrays: npy for stored blobs, msgpack for per-sample records.

Nothing here can run code on read, and nothing allocates what a header merely claims:
an npy header is parsed and its shape checked against the bytes that follow before the
array is made (as a view of those bytes), and msgpack is decoded without any ext hooks.
Every malformed input is one :class:`Malformed`.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any

import msgpack
import numpy as np

from rayform.errors import Malformed
from rayform.untrusted import dtype as checked_dtype
from rayform.untrusted import parsing
from rayform.untrusted import shape as checked_shape

NPY_MAX_HEADER = 1 << 16


def to_npy(array: np.ndarray) -> bytes:
    """The bytes ``np.save`` writes (blobs are named by them, so byte for byte numpy's): its
    header, made once per dtype and shape, and the array's data."""
    array = np.ascontiguousarray(array)
    key = (array.dtype, array.shape)
    header = _NPY_HEADERS.get(key)
    if header is None:  # numpy's own header for this dtype and shape: what it writes before the data
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        written = buf.getvalue()
        header = written[:len(written) - array.nbytes]
        if len(_NPY_HEADERS) >= 4096:
            _NPY_HEADERS.clear()
        _NPY_HEADERS[key] = header
        return written
    return header + array.tobytes()


# Building a header costs numpy ~40 µs, far more than a small stream's data: an ingest of a
# million short episodes writes two million arrays of a few shapes.
_NPY_HEADERS: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}


# The header numpy itself writes (version 1.0): read by a pattern, as ``ast.literal_eval`` costs
# ~70 µs a header, and a pack of a million short episodes reads millions of them. Any other
# header takes numpy's own reader.
_NPY_1_0 = re.compile(rb"\{'descr': '([<>|=]?[a-zA-Z][0-9]{0,2})', 'fortran_order': False, "
                      rb"'shape': \(((?:[0-9]{1,18}, ?)*[0-9]{0,18})\), \} *\n")


def npy_header(head: bytes | memoryview, what: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, data offset)`` of an npy file from its first bytes (C order only)."""
    if bytes(head[:8]) == b"\x93NUMPY\x01\x00" and len(head) >= 10:
        size = int.from_bytes(bytes(head[8:10]), "little")
        m = _NPY_1_0.fullmatch(bytes(head[10:10 + size]))
        if m is not None:
            dims = [int(d) for d in m.group(2).split(b",") if d.strip()]
            return checked_shape(dims, what), checked_dtype(m.group(1).decode(), what, "biuf"), 10 + size
    with parsing(what):
        f = io.BytesIO(bytes(head[:NPY_MAX_HEADER]))
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            header = np.lib.format.read_array_header_1_0(f, max_header_size=NPY_MAX_HEADER)
        elif version in ((2, 0), (3, 0)):
            header = np.lib.format.read_array_header_2_0(f, max_header_size=NPY_MAX_HEADER)
        else:
            raise Malformed(f"{what}: npy version {version} is not read")
        shape, fortran, descr = header
        offset = f.tell()
    if fortran:
        raise Malformed(f"{what}: a Fortran-ordered npy array is not read")
    if not isinstance(descr, np.dtype):
        raise Malformed(f"{what}: npy dtype {descr!r} refused")
    return checked_shape(list(shape), what), checked_dtype(descr.str, what, "biuf"), offset


def from_npy(data: bytes | memoryview, what: str = "npy blob") -> np.ndarray:
    """The array in npy bytes, as a read-only view of them; Malformed if the header lies."""
    shape, dt, offset = npy_header(data, what)
    need = math.prod(shape) * dt.itemsize
    if len(data) - offset != need:
        raise Malformed(f"{what}: its header claims {shape} {dt} ({need} bytes), it holds {len(data) - offset}")
    return np.frombuffer(data, dtype=dt, count=math.prod(shape), offset=offset).reshape(shape)


def pack_array(array: np.ndarray) -> dict[str, Any]:
    """An array as a self-describing msgpack map: dtype string, shape, raw bytes."""
    array = np.ascontiguousarray(array)
    return {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}


def unpack_array(obj: Any, what: str = "record") -> np.ndarray:
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), bytes):
        raise Malformed(f"{what}: an array entry is not {{dtype, shape, data}}")
    dt = checked_dtype(obj.get("dtype"), what)
    shape = checked_shape(obj.get("shape"), what)
    if len(obj["data"]) != math.prod(shape) * dt.itemsize:
        raise Malformed(f"{what}: an array of {shape} {dt} holds {len(obj['data'])} bytes")
    return np.frombuffer(obj["data"], dtype=dt).reshape(shape)


def dumps(obj: Any) -> bytes:
    result: bytes = msgpack.packb(obj, use_bin_type=True)
    return result


def loads(data: bytes | memoryview, what: str = "record") -> Any:
    with parsing(what):
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=True)
        except msgpack.exceptions.UnpackException as e:  # not every one is a ValueError
            raise Malformed(f"{what}: not a msgpack record ({e})") from None
