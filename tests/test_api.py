"""The public API, pinned: a name added to or dropped from it is a decision, made here too."""

from __future__ import annotations

import pytest

import rayform

PUBLIC = [
    "ArrayStream", "CachedStore", "Client", "ImageStream", "IntegrityError", "InvalidInput", "Malformed",
    "NotFound", "OfflineError", "Pack", "PackNotFound", "PackSpec", "PoseStream", "RayformError", "Retry", "Segment",
    "SegmentNotFound", "SegmentRef", "ShardCache", "Slice", "SliceNotFound", "Store", "StoreError",
    "StreamNotFound", "VideoStream", "__version__", "doctor",
]
TORCH = ["Action", "ClipBatchSampler", "EpisodeDataset", "Retry", "SampleSpec", "ShuffleConfig", "Split",
         "StreamingEpisodeDataset", "World"]


def test_rayform_exports_exactly_its_public_names():
    assert sorted(rayform.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(rayform, name) is not None


def test_rayform_torch_exports_exactly_its_public_names():
    torch_api = pytest.importorskip("rayform.torch")
    assert sorted(torch_api.__all__) == sorted(TORCH)
    for name in TORCH:
        assert getattr(torch_api, name) is not None


def test_every_error_is_a_rayform_error():
    errors = [getattr(rayform, n) for n in PUBLIC if n.endswith(("Error", "NotFound", "Input", "Malformed"))]
    assert errors and all(issubclass(e, rayform.RayformError) for e in errors)
