"""Normalizing a sample's arrays by its pack's statistics: ``normalize=`` on both datasets.

``normalize={"joints/position": "mean_std", "action": "min_max"}`` names sample keys (array
streams in ``obs``, and ``"action"``, whose statistics are those of the action stream or of
its derived delta) and a mode each:

- ``"mean_std"``: ``(x − mean) / std``;
- ``"min_max"``: ``min … max`` onto ``−1 … 1``;
- ``"quantile"``: ``q01 … q99`` onto ``−1 … 1`` (values beyond them go beyond ±1, unclipped).

An element that does not vary (std or range 0) is only shifted. Applied in place to each
built sample, in float32; ``unnormalize`` inverts it (for a policy's predicted actions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rayform.errors import InvalidInput
from rayform.pack.stats import StreamStats

MODES = ("mean_std", "min_max", "quantile")


class Normalizer:
    """``(x − offset) · scale`` per key, from ``modes`` and the statistics ``stats`` of the
    streams named by ``sources`` (sample key → statistics name)."""

    def __init__(self, modes: Mapping[str, str], stats: Mapping[str, StreamStats], sources: Mapping[str, str]):
        if not isinstance(modes, Mapping):
            raise InvalidInput(f"normalize {str(modes)[:60]!r}: a mapping of sample keys to modes, "
                               "e.g. {\"action\": \"min_max\"}")
        self.offset: dict[str, np.ndarray] = {}
        self.scale: dict[str, np.ndarray] = {}
        for key, mode in modes.items():
            if key not in sources:
                raise InvalidInput(f"normalize {key!r}: not an array of these samples. "
                                   f"It can name: {', '.join(sorted(sources)) or 'nothing (no array in obs or action)'}")
            if mode not in MODES:
                raise InvalidInput(f"normalize {key!r}: mode {str(mode)[:40]!r}, one of {', '.join(MODES)}")
            s = stats[sources[key]]
            if mode == "mean_std":
                low, span = s.mean, 2 * s.std  # so that the scale below is 1/std
                centre = s.mean
            else:
                low, high = (s.min, s.max) if mode == "min_max" else (s.q01, s.q99)
                centre, span = (low + high) / 2, high - low
            self.offset[key] = np.asarray(centre, np.float32)
            self.scale[key] = np.asarray(np.divide(2.0, span, out=np.ones_like(span), where=span > 0), np.float32)

    def apply(self, out: dict[str, Any]) -> None:
        """Normalize the sample's arrays in place."""
        for key, offset in self.offset.items():
            values = out[key]
            np.subtract(values, offset, out=values)
            np.multiply(values, self.scale[key], out=values)

    def invert(self, key: str, values: Any) -> Any:
        """``values`` of ``key`` back in the stream's units (numpy or torch, shape ``(..., *element)``)."""
        if key not in self.offset:
            raise InvalidInput(f"unnormalize {key!r}: the dataset does not normalize it (normalize={sorted(self.offset)})")
        if hasattr(values, "new_tensor"):  # torch, without importing it here
            return values / values.new_tensor(self.scale[key]) + values.new_tensor(self.offset[key])
        return np.asarray(values, np.float32) / self.scale[key] + self.offset[key]
