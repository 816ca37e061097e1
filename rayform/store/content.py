"""The hash of content and the one byte form of a document: what names every blob."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

CHUNK = 4 << 20


def sha256_hex(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a manifest, so equal content gives an equal hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def hash_file(path: str | os.PathLike[str]) -> str:
    # read into one reused buffer, not mapped whole: a mapped 64 MB shard would count in the
    # process's RSS while it is hashed, and a worker's first batch hashes dozens of them
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
