"""rayform: robot recordings into training data that streams.

``import rayform`` is light: each public name below is imported on first use, so it imports
neither torch nor any converter's library (nor numpy, until a name needs it), and the
``rayform`` command answers Ctrl-C from its first instant. ``rayform.torch`` (the datasets)
is imported on first use too.
"""

from __future__ import annotations

from rayform.interrupts import guard_the_command

guard_the_command()  # first: a Ctrl-C while the ``rayform`` command imports is one line, not a traceback

import importlib  # noqa: E402

TYPE_CHECKING = False  # not typing's: importing typing takes longer than the rest of this file
__version__ = "0.1.0"

# public name -> the module that defines it
_PUBLIC = {
    "Client": "rayform.client",
    "IntegrityError": "rayform.errors", "InvalidInput": "rayform.errors", "Malformed": "rayform.errors",
    "NotFound": "rayform.errors", "OfflineError": "rayform.errors", "PackNotFound": "rayform.errors",
    "RayformError": "rayform.errors", "SegmentNotFound": "rayform.errors", "SliceNotFound": "rayform.errors",
    "StoreError": "rayform.errors", "StreamNotFound": "rayform.errors",
    "Pack": "rayform.pack", "PackSpec": "rayform.pack",
    "Segment": "rayform.recordings.segment_reader", "SegmentRef": "rayform.recordings.segment_writer",
    "Slice": "rayform.recordings.slices",
    "ArrayStream": "rayform.recordings.streams", "ImageStream": "rayform.recordings.streams",
    "PoseStream": "rayform.recordings.streams", "VideoStream": "rayform.recordings.streams",
    "ShardCache": "rayform.cache.directory", "CachedStore": "rayform.cache.store_view", "Store": "rayform.store.store",
    "Retry": "rayform.store.retry",
    "doctor": "rayform.ops.diagnosis",
}

__all__ = [
    "ArrayStream", "CachedStore", "Client", "ImageStream", "IntegrityError", "InvalidInput", "Malformed", "NotFound",
    "OfflineError", "Pack", "PackNotFound", "PackSpec", "PoseStream", "RayformError", "Retry", "Segment", "SegmentNotFound",
    "SegmentRef", "ShardCache", "Slice", "SliceNotFound", "Store", "StoreError", "StreamNotFound", "VideoStream",
    "__version__", "doctor",
]

if TYPE_CHECKING:
    from typing import Any

    from rayform.cache.directory import ShardCache
    from rayform.cache.store_view import CachedStore
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
    from rayform.ops.diagnosis import doctor
    from rayform.pack import Pack, PackSpec
    from rayform.recordings.segment_reader import Segment
    from rayform.recordings.segment_writer import SegmentRef
    from rayform.recordings.slices import Slice
    from rayform.recordings.streams import ArrayStream, ImageStream, PoseStream, VideoStream
    from rayform.store.retry import Retry
    from rayform.store.store import Store


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    # `rayform.torch.EpisodeDataset` works after a bare `import rayform`
    if name in ("torch", "converters"):
        return importlib.import_module(f"rayform.{name}")
    raise AttributeError(f"module 'rayform' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
