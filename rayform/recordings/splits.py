"""Deterministic, segment-disjoint splits of a slice (train / val / test).

A segment goes to a split by the hash of (seed, segment id) alone: the sha256 of
``"<seed>:<segment id>"`` read as a number in [0, 1) falls in one split's share of [0, 1)
(the shares in the order given). So the same slice and seed always give the same children,
every version and every time range of one segment land in the same split (no leak between
train and val), and adding segments to a slice never moves an existing one to another split.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping

from rayform.errors import InvalidInput

SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    """The split names and shares, checked: names like ``train``, shares > 0 summing to 1."""
    if not isinstance(fractions, Mapping) or not fractions:
        raise InvalidInput(f"splits {str(fractions)[:80]!r}: give shares by name, e.g. {{'train': 0.9, 'val': 0.1}}")
    out = {}
    for name, share in fractions.items():
        if not isinstance(name, str) or not SPLIT_NAME.fullmatch(name):
            raise InvalidInput(f"split name {str(name)[:40]!r}: letters, digits, '_', '.', '-' (e.g. train)")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not math.isfinite(share) or share <= 0:
            raise InvalidInput(f"split {name}: share {share!r} must be a number above 0")
        out[name] = float(share)
    if abs(sum(out.values()) - 1) > 1e-6:
        raise InvalidInput(f"splits {out}: the shares sum to {sum(out.values()):g}, not 1")
    return out


def position(segment_id: str, seed: int) -> float:
    """Where a segment falls in [0, 1): a pure function of (seed, segment id)."""
    digest = hashlib.sha256(f"{seed}:{segment_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_of(segment_id: str, fractions: Mapping[str, float], seed: int = 0) -> str:
    """The name of the split ``segment_id`` belongs to."""
    u, edge = position(segment_id, seed), 0.0
    names = list(fractions)
    for name in names:
        edge += fractions[name]
        if u < edge:
            return name
    return names[-1]  # rounding: the shares summed to a hair under 1
