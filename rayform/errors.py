"""Every error rayform raises on purpose.

Each also subclasses the built-in exception a caller would naturally catch, so
``except KeyError`` still works around ``client.slices.get``::

    RayformError
    ├── NotFound (KeyError)
    │   ├── SliceNotFound
    │   ├── SegmentNotFound
    │   ├── PackNotFound
    │   └── BlobNotFound
    ├── IntegrityError (ValueError)       a blob whose bytes do not match its hash
    │   └── Malformed                      stored content (a ref, manifest, index, record,
    │                                      image) that is not what rayform writes
    ├── InvalidInput (ValueError)         bad arguments or source data: a missing stream,
    │   └── StreamNotFound                 an fps the pack cannot serve, a malformed file
    ├── OfflineError (ConnectionError)    RAYFORM_OFFLINE=1 and the bytes are not cached
    └── StoreError (OSError)              the store could not be read or written

Messages read ``subject: problem. fix``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class RayformError(Exception):
    """Base class of every error rayform raises on purpose."""

    def __str__(self) -> str:  # KeyError would repr() its message; keep it readable
        return str(self.args[0]) if self.args else self.__class__.__name__


class NotFound(RayformError, KeyError):
    """Something named by id is not in the store."""


class SliceNotFound(NotFound):
    """No slice with this id in the store."""


class SegmentNotFound(NotFound):
    """No segment (or segment version) with this id in the store."""


class PackNotFound(NotFound):
    """The slice has no pack with the asked parameters."""


class BlobNotFound(NotFound):
    """A blob named by a manifest is missing from the store."""


class IntegrityError(RayformError, ValueError):
    """Bytes do not match the sha256 that names them."""


class Malformed(IntegrityError):
    """Stored content that rayform did not write: a ref, manifest, index, record or image whose
    form, names or sizes are not rayform's (corrupt, or made by a hostile store)."""


class InvalidInput(RayformError, ValueError):
    """Arguments or source data that rayform cannot use."""


class StreamNotFound(InvalidInput):
    """A stream was asked for that the slice or segment does not have."""


class OfflineError(RayformError, ConnectionError):
    """RAYFORM_OFFLINE=1 forbids reading a non-local store, and the bytes are not cached."""


class StoreError(RayformError, OSError):
    """The store could not be read or written."""


class ScratchError(RayformError, OSError):
    """Local working space (packing's scratch) could not be written."""


def raised_here(fn: Callable[P, R]) -> Callable[P, R]:
    """A public entry point (a dataset's constructor, a client method): a mistake of the
    caller's (``InvalidInput``, ``NotFound``) comes out of it with its traceback cut at the
    call, so the caller sees their own line and one message, not rayform's insides."""

    @functools.wraps(fn)
    def entry(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (InvalidInput, NotFound) as e:
            raise e.with_traceback(None) from None

    return entry


@contextlib.contextmanager
def fixed_by(fix: str, *kinds: type[RayformError]) -> Iterator[None]:
    """An error of ``kinds`` raised inside gets ``fix`` said after it: the layers below say what
    failed, and the caller, who knows which slice or command it is about, says how to fix it."""
    try:
        yield
    except kinds as e:
        raise type(e)(f"{e}. {fix}") from None
