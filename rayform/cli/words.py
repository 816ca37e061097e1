"""How the command says counts and types: the same words in every command."""

from __future__ import annotations

import numpy as np

_KINDS = {"u": "unsigned integer", "i": "integer", "f": "float", "b": "bool"}


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 segment``, ``2 segments`` (``nouns``: the plural where it is not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


def dtype_in_words(dtype: str) -> str:
    """``32-bit float``, ``8-bit unsigned integer``, ``bool``."""
    d = np.dtype(dtype)
    if d.kind == "b":
        return "bool"
    return f"{8 * d.itemsize}-bit {_KINDS.get(d.kind, d.name)}"
