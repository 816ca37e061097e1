"""A LeRobot dataset ingested where it lies, in a bucket on a real S3 endpoint (loopback): the
same segments as from local disk."""

from __future__ import annotations

import fsspec

import rayform


def test_a_lerobot_dataset_in_s3_ingests_as_from_disk(real_data, s3_endpoint, tmp_path):
    root = real_data / "lerobot_v30_so101_ros2_example"
    options = s3_endpoint.storage_options
    bucket = s3_endpoint.bucket()
    fs = fsspec.filesystem("s3", **options)
    fs.put(str(root), f"{bucket}/datasets/{root.name}", recursive=True)  # a segment is named after its dataset
    local = rayform.Client(tmp_path / "a").ingest("lerobot", [root], "so101", progress=False)
    client = rayform.Client(tmp_path / "b")
    s3_endpoint.reset_counts()
    remote = client.ingest("lerobot", [f"s3://{bucket}/datasets/{root.name}"], "so101", workers=2, slice_name="so101",
                           options={"storage_options": options}, progress=False)
    assert [(r.id, r.version) for r in remote.segments] == [(r.id, r.version) for r in local.segments]
    x = rayform.torch.EpisodeDataset(remote.slice, obs=["wrist/rgb"], fps=30)[0]
    assert x["wrist/rgb"].shape == (3, 360, 640)


def test_a_bad_url_or_a_format_that_is_not_lerobot_is_one_clear_error(s3_endpoint, tmp_path):
    import pytest

    client = rayform.Client(tmp_path / "store")
    bucket = s3_endpoint.bucket()
    with pytest.raises(rayform.InvalidInput, match="missing.*not a LeRobot dataset"):
        client.ingest("lerobot", [f"s3://{bucket}/nothing"], "lab", options={"storage_options":
                                                                             s3_endpoint.storage_options},
                      progress=False)
    with pytest.raises(rayform.InvalidInput, match="hdf5 sources are local files"):
        client.ingest("hdf5", [f"s3://{bucket}/x.hdf5"], "lab", options={"fps": 10}, progress=False)
    assert client.segments.list() == []


def test_an_rlds_dataset_in_s3_ingests_as_from_disk(s3_endpoint, tmp_path):
    """Each shard a task reading its records from the bucket: the same segments, byte for byte."""
    from pathlib import Path

    import pytest

    pytest.importorskip("google.protobuf", reason="the rlds extra is not installed")
    pytest.importorskip("google_crc32c", reason="the rlds extra is not installed")

    root = Path(__file__).resolve().parents[1] / "data" / "rlds" / "toy_rlds" / "1.0.0"
    options = s3_endpoint.storage_options
    bucket = s3_endpoint.bucket()
    fsspec.filesystem("s3", **options).put(str(root), f"{bucket}/open-x/toy_rlds/1.0.0", recursive=True)
    local = rayform.Client(tmp_path / "a").ingest("rlds", [root], "toy", options={"fps": 10}, progress=False)
    remote = rayform.Client(tmp_path / "b").ingest("rlds", [f"s3://{bucket}/open-x/toy_rlds/1.0.0"], "toy", workers=2,
                                                    options={"fps": 10, "storage_options": options}, progress=False)
    assert len(local.segments) == 4
    assert [(r.id, r.version) for r in remote.segments] == [(r.id, r.version) for r in local.segments]
