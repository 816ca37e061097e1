"""rayform: robot recordings into training data that streams.

``import rayform`` is light: it imports neither torch nor any converter's library.
``rayform.torch`` (the datasets) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from rayform.client import Client
from rayform.errors import (
    IntegrityError,
    InvalidInput,
    Malformed,
    NotFound,
    OfflineError,
    PackNotFound,
    RayformError,
    SegmentNotFound,
    SliceNotFound,
    StoreError,
    StreamNotFound,
)
from rayform.pack import Pack, PackSpec
from rayform.recordings.segments import Segment, SegmentRef
from rayform.recordings.slices import Slice
from rayform.recordings.streams import ArrayStream, ImageStream, PoseStream
from rayform.store.cache import ShardCache
from rayform.store.cached import CachedStore
from rayform.store.store import Store

__version__ = "0.1.0"

__all__ = [
    "ArrayStream", "CachedStore", "Client", "ImageStream", "IntegrityError", "InvalidInput", "Malformed", "NotFound",
    "OfflineError",
    "Pack", "PackNotFound", "PackSpec", "PoseStream", "RayformError", "Segment", "SegmentNotFound",
    "SegmentRef", "ShardCache", "Slice", "SliceNotFound", "Store", "StoreError", "StreamNotFound", "__version__",
]


def __getattr__(name: str) -> Any:
    # `rayform.torch.EpisodeDataset` works after a bare `import rayform`, without
    # making every `import rayform` pay for importing torch.
    if name in ("torch", "converters"):
        return importlib.import_module(f"rayform.{name}")
    raise AttributeError(f"module 'rayform' has no attribute {name!r}")
