"""Numpy samples as torch tensors, without copying the arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def to_torch(sample: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in sample.items():
        if isinstance(value, np.ndarray):
            out[key] = torch.from_numpy(value)
        elif isinstance(value, np.generic):
            out[key] = torch.from_numpy(np.asarray(value))  # a 0-d tensor, as cheaply as it comes
        else:
            out[key] = value
    return out
