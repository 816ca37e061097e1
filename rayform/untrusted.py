"""Reading what a store hands over: refs, manifests and records are untrusted documents.

A blob whose bytes match its hash can still hold anything (a hostile store writes valid
hashes of hostile content). Every document is parsed here or under :func:`parsing`, which
turns whatever a malformed document makes Python raise (``KeyError``, ``TypeError``,
``JSONDecodeError``, ``RecursionError``…) into one :class:`Malformed` naming the document,
and the typed getters below bound every number and size before anything is allocated.
"""

from __future__ import annotations

import json
import math
import tokenize
from collections.abc import Mapping
from typing import Any

import numpy as np

from rayform.errors import Malformed, RayformError

MAX_DIMS = 8
MAX_ELEMENTS = 1 << 34  # a shape claiming more than this is refused before any allocation
_FOREIGN = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError, AssertionError,
            RecursionError, UnicodeError, LookupError, ArithmeticError, SyntaxError,
            tokenize.TokenError)  # numpy tokenizes an npy header it cannot evaluate


class parsing:  # lower case: used as a function, ``with parsing(what):``
    """Inside: any foreign exception a malformed document causes becomes one Malformed naming
    ``what``. A class rather than a generator context manager: every sample is built inside
    one, and this costs a fifth as much."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: Any) -> None:
        if e is None or isinstance(e, RayformError) or not isinstance(e, _FOREIGN):
            return
        raise Malformed(f"{self.what}: malformed ({type(e).__name__}: {str(e)[:160]})") from None


def json_document(data: bytes, what: str) -> dict[str, Any]:
    """A JSON object; Malformed if the bytes are not one."""
    with parsing(what):
        doc = json.loads(data)
    if not isinstance(doc, dict):
        raise Malformed(f"{what}: malformed (a JSON {type(doc).__name__}, not an object)")
    return doc


def json_objects(data: bytes | memoryview, what: str) -> list[dict[str, Any]]:
    """A JSON list of objects; Malformed if the bytes are not one."""
    with parsing(what):
        doc = json.loads(bytes(data))
    if not isinstance(doc, list) or not all(isinstance(d, dict) for d in doc):
        raise Malformed(f"{what}: not a list of objects")
    return doc


def mapping(doc: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise Malformed(f"{what}: malformed (not an object)")
    return doc


def string(doc: Mapping[str, Any], key: str, what: str, *, optional: bool = False) -> Any:
    value = doc.get(key) if optional else _field(doc, key, what)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Malformed(f"{what}: {key} is not a string")
    return value


def integer(doc: Mapping[str, Any], key: str, what: str, lo: int = 0, hi: int = 1 << 62,
            *, optional: bool = False) -> Any:
    value = doc.get(key) if optional else _field(doc, key, what)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise Malformed(f"{what}: {key} {str(value)[:40]!r} is not an integer in [{lo}, {hi}]")
    return value


def array_list(doc: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = _field(doc, key, what)
    if not isinstance(value, list):
        raise Malformed(f"{what}: {key} is not a list")
    return value


def shape(value: Any, what: str) -> tuple[int, ...]:
    """A bounded array shape: at most 8 non-negative dimensions, at most 2**34 elements."""
    if not isinstance(value, (list, tuple)) or len(value) > MAX_DIMS:
        raise Malformed(f"{what}: shape {str(value)[:60]} is not a list of at most {MAX_DIMS} sizes")
    for d in value:  # a loop, not all(<generator>): this runs for every array of every sample
        if type(d) is not int or not 0 <= d <= MAX_ELEMENTS:  # type, not isinstance: no bool
            raise Malformed(f"{what}: shape {str(value)[:60]} is not a list of at most {MAX_DIMS} sizes")
    if math.prod(value) > MAX_ELEMENTS:
        raise Malformed(f"{what}: shape {list(value)} claims more than {MAX_ELEMENTS} elements")
    return tuple(value)


def dtype(value: Any, what: str, kinds: str = "biuf") -> np.dtype:
    """A plain numeric (or bool) dtype: never an object, a structure or a void."""
    if not isinstance(value, str) or len(value) > 8:
        raise Malformed(f"{what}: dtype {str(value)[:40]!r} is not a dtype string")
    with parsing(what):
        dt = np.dtype(value)
    if dt.kind not in kinds or dt.hasobject or dt.fields is not None or dt.subdtype is not None:
        raise Malformed(f"{what}: dtype {value!r} refused (only {kinds} kinds)")
    return dt


def _field(doc: Mapping[str, Any], key: str, what: str) -> Any:
    if not isinstance(doc, Mapping):
        raise Malformed(f"{what}: malformed (not an object)")
    if key not in doc:
        raise Malformed(f"{what}: malformed (no {key!r})")
    return doc[key]
