"""The RAYFORM_* environment variables, read when used (never at import).

Every reader takes ``env`` so tests can pass their own mapping.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_STORE = "~/.local/share/rayform/store"
READER_RESIDENT = 32 << 20  # see reader_resident
BATCH_SLOTS = 6  # see batch_slots
DEFAULT_CACHE = "~/.cache/rayform"
_TRUE = {"1", "true", "yes", "on"}


def store_url(env: Mapping[str, str] = os.environ) -> str:
    """The store used when none is given: RAYFORM_STORE, else a local directory."""
    url = env.get("RAYFORM_STORE") or DEFAULT_STORE
    return os.path.expanduser(url) if "://" not in url else url


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The shard cache: RAYFORM_CACHE_DIR, else ~/.cache/rayform."""
    return Path(os.path.expanduser(env.get("RAYFORM_CACHE_DIR") or DEFAULT_CACHE))


def cache_limit(env: Mapping[str, str] = os.environ) -> str | None:
    """The shard cache's size limit as written in RAYFORM_CACHE_LIMIT (e.g. ``200GB``), else None."""
    return env.get("RAYFORM_CACHE_LIMIT", "").strip() or None


def measure_health(env: Mapping[str, str] = os.environ) -> bool:
    """Whether segments are measured for health as they are stored (RAYFORM_HEALTH=off: not,
    what the ingest benchmark compares against)."""
    return env.get("RAYFORM_HEALTH", "on").strip().lower() != "off"


def offline(env: Mapping[str, str] = os.environ) -> bool:
    """True when RAYFORM_OFFLINE forbids reading any non-local store."""
    return env.get("RAYFORM_OFFLINE", "").strip().lower() in _TRUE


def pack_workers(env: Mapping[str, str] = os.environ) -> int | None:
    """Processes used to pack when none is given: RAYFORM_PACK_WORKERS, else all cores."""
    value = env.get("RAYFORM_PACK_WORKERS")
    if not value:
        return None
    if not value.strip().isdigit() or not 1 <= int(value) <= 4096:
        from rayform.errors import InvalidInput

        raise InvalidInput(f"RAYFORM_PACK_WORKERS={value[:40]!r}: must be a whole number of processes, 1..4096")
    return int(value)


def reader_resident(env: Mapping[str, str] = os.environ) -> int:
    """Bytes of mapped shard pages a reader lets its process gain before it drops them from its
    resident set (they stay in the page cache): RAYFORM_READER_RESIDENT (``32MiB``, bytes; 0:
    never drop), else 32 MiB."""
    value = env.get("RAYFORM_READER_RESIDENT", "").strip()
    if not value:
        return READER_RESIDENT
    from rayform.sizes import parse_size

    return parse_size(value, "RAYFORM_READER_RESIDENT")


def batch_slots(env: Mapping[str, str] = os.environ) -> int:
    """Recycled shared-memory slots a DataLoader worker keeps for its batches (prefetched and
    held): RAYFORM_BATCH_SLOTS (0: none, every batch in fresh memory), else 6."""
    value = env.get("RAYFORM_BATCH_SLOTS", "").strip()
    if not value:
        return BATCH_SLOTS
    if not value.isdigit() or not 0 <= int(value) <= 1024:
        from rayform.errors import InvalidInput

        raise InvalidInput(f"RAYFORM_BATCH_SLOTS={value[:40]!r}: a whole number of slots, 0..1024")
    return int(value)


DECODED_FRAMES = 192 << 20


def decoded_frames(env: Mapping[str, str] = os.environ, needed: int = 0) -> int:
    """Bytes of decoded video frames a reader process keeps for the samples still to come:
    RAYFORM_DECODED_FRAMES (default ``192MiB``, or 1.5x ``needed``, what the reading order
    holds at once, where that is more; 0: each clip decoded for each batch that reads it)."""
    value = env.get("RAYFORM_DECODED_FRAMES", "").strip()
    if not value:
        return max(DECODED_FRAMES, needed * 3 // 2)
    from rayform.sizes import parse_size

    return parse_size(value, "RAYFORM_DECODED_FRAMES")
