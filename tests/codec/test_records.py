"""npy and msgpack forms of arrays: numpy's bytes exactly (blobs are named by them), read back safely."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rayform.codec.records import from_npy, to_npy

DTYPES = st.sampled_from(["<f4", ">f4", "<f8", "<i8", ">i2", "|u1", "|i1", "|b1", "<u4", "<f2"]).map(np.dtype)


def _saved(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=7)), st.booleans())
def test_to_npy_writes_what_np_save_writes_byte_for_byte(array, transposed):
    """A header made once per dtype and shape is reused: every later array of that form still
    gets numpy's bytes (a blob's name is their digest: other bytes would split a dedupe)."""
    if transposed:
        array = array.T  # not C-contiguous: made so before writing
    first, again = to_npy(array), to_npy(array.copy())
    assert first == again == _saved(array)
    stored = np.ascontiguousarray(array)  # a 0-d array is stored as one value
    back = from_npy(again, "test")
    assert back.dtype == stored.dtype and back.shape == stored.shape and back.tobytes() == stored.tobytes()


def test_arrays_of_one_form_but_other_values_get_their_own_bytes():
    a, b = np.zeros((10, 2), np.float32), np.ones((10, 2), np.float32)
    assert to_npy(a) != to_npy(b) and to_npy(b) == _saved(b) and to_npy(a) == _saved(a)
