"""The grammar of every name that can become part of a path: digests, ids, sites, keys.

A store is untrusted input: a ref, a manifest or a listing may hand over ``/etc/passwd``,
``../../x`` or a name with a NUL in it. Every such name is checked here, against the one
form rayform itself writes, before any path is built from it (in the store and in the
cache alike), so nothing outside the store and the cache can be named, written or deleted.

Each check returns the name unchanged or raises :class:`Malformed` (from a store) or
:class:`InvalidInput` (from a caller), naming what it was and where it came from.
"""

from __future__ import annotations

import re

from rayform.errors import InvalidInput, Malformed

DIGEST = re.compile(r"[0-9a-f]{64}")
SLICE_ID = re.compile(r"slc_[0-9a-f]{8,64}")
SEGMENT_ID = re.compile(r"seg_[0-9a-f]{12}")
SITE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")  # never ".", ".." or a hidden name
PACK_KEY = re.compile(r"fps[0-9][0-9.e+\-]{0,23}-[0-9a-f]{8}")
STORE_ID = re.compile(r"[0-9a-f]{16}")
# One component of a key: starts with a letter, digit or '_' (so never '.', '..' or a
# '.tmp-' temporary), then letters, digits, '_', '-', '.'.
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_TOPS = ("blobs", "refs", "store.json")


def _bad(what: str, value: object, form: str, trusted: bool) -> Exception:
    cls = InvalidInput if trusted else Malformed
    shown = repr(value)[:80]
    return cls(f"{what} {shown}: not {form}" + ("" if trusted else "; the store's data is corrupt or hostile"))


def _check(pattern: re.Pattern[str], value: object, what: str, form: str, trusted: bool) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _bad(what, value, form, trusted)
    return value


def digest(value: object, what: str = "blob name", *, trusted: bool = False) -> str:
    """A sha256 hex digest: 64 lowercase hex characters."""
    return _check(DIGEST, value, what, "a sha256 hex digest", trusted)


def slice_id(value: object, what: str = "slice id", *, trusted: bool = False) -> str:
    return _check(SLICE_ID, value, what, "a slice id (slc_ and 8-64 hex)", trusted)


def segment_id(value: object, what: str = "segment id", *, trusted: bool = False) -> str:
    return _check(SEGMENT_ID, value, what, "a segment id (seg_ and 12 hex)", trusted)


def site(value: object, what: str = "site", *, trusted: bool = True) -> str:
    return _check(SITE, value, what, "a site (1-64 letters, digits, '_', '-' or '.', not starting with '.')",
                  trusted)


def store_id(value: object, what: str = "store id") -> str:
    return _check(STORE_ID, value, what, "a store id (16 hex)", False)


def key(value: object, what: str = "store key") -> str:
    """A relative key under a store's (or the cache's) root: ``refs/…`` or ``blobs/…``, every
    component a plain name (no ``..``, no leading dot, no empty part, no absolute path)."""
    if not isinstance(value, str) or len(value) > 512:
        raise _bad(what, value, "a store key", False)
    parts = value.split("/")
    if parts[0] not in _TOPS or not all(_COMPONENT.fullmatch(p) for p in parts):
        raise _bad(what, value, "a store key (refs/… or blobs/…, plain names, no '..')", False)
    return value


def is_key(value: object) -> bool:
    try:
        key(value)
    except Malformed:
        return False
    return True
