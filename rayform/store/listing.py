"""What a store's listing names, read as untrusted input: a name that is not a blob's or a
ref's (a temporary, a stray file, ``..``, odd characters) is left out, never built into a path."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rayform import names
from rayform.store.freshness import modified_of

log = logging.getLogger("rayform")


@dataclass(frozen=True)
class StoredBlob:
    digest: str
    size: int
    modified: float | None  # seconds since the epoch; None where the backend does not say


def blobs(found: Mapping[str, dict[str, Any]]) -> Iterator[StoredBlob]:
    """The blobs of a detailed listing of ``blobs/`` (path -> fsspec's details), by path."""
    for path, info in sorted(found.items()):
        digest = path.rstrip("/").rsplit("/", 1)[-1]
        if info.get("type", "file") != "file" or not names.DIGEST.fullmatch(digest):
            continue
        if not path.endswith(f"/blobs/{digest[:2]}/{digest}"):
            continue
        yield StoredBlob(digest, int(info.get("size") or 0), modified_of(info))


def ref_keys(found: Iterable[str], root: str, prefix: str, display: str) -> list[str]:
    """The ref keys (``refs/…/x.json``) below ``prefix`` among the listed paths, sorted; one
    that is not a rayform name is skipped with a warning."""
    root = root.rstrip("/") + "/"
    keys = []
    for path in found:
        rel = path[len(root):] if path.startswith(root) else path
        if not rel.endswith(".json") or os.path.basename(rel).startswith("."):
            continue
        if names.is_key(rel) and rel.startswith(prefix.rstrip("/") + "/"):
            keys.append(rel)
        else:
            log.warning("rayform: %s: ignoring the key %r (not a rayform name)", display, rel[:120])
    return sorted(keys)
