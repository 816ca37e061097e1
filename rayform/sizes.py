"""Sizes in bytes as people write them (``64MiB``, ``1.2 GB``, ``200GB``), parsed and shown one way."""

from __future__ import annotations

import re

from rayform.errors import InvalidInput

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 1 << 10, "m": 1e6, "mb": 1e6, "mib": 1 << 20,
          "g": 1e9, "gb": 1e9, "gib": 1 << 30, "t": 1e12, "tb": 1e12, "tib": 1 << 40}


def parse_size(text: str | int, what: str = "size") -> int:
    """``64MB`` (10⁶ each), ``512KiB`` (2¹⁰ each), plain digits or an int, in bytes."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InvalidInput(f"{what} {text}: must not be negative")
        return text
    m = _SIZE.match(str(text)[:40])
    if not m or (m.group(2) or "").lower() not in _UNITS:
        raise InvalidInput(f"{what} {str(text)[:40]!r}: write it like 64MB, 512KiB, 200GB or 1000000")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])


def format_size(n: float) -> str:
    """``n`` bytes in binary units, e.g. ``1.2 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError
