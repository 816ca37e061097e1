"""objectread against a real S3 endpoint on loopback: one signed GET, read as it arrives."""

from __future__ import annotations

import os

import fsspec
import pytest

from rayform.store import objectread

pytestmark = pytest.mark.s3


@pytest.fixture
def s3_object(s3_endpoint):
    fs = fsspec.filesystem("s3", **s3_endpoint.storage_options)
    path = f"{s3_endpoint.bucket()}/blobs/obj"
    data = os.urandom(200_000)
    fs.pipe_file(path, data)
    return fs, path, data


def _all(r, n=30_000):
    parts = []
    while part := r.read(n):
        parts.append(part)
    r.close()
    return b"".join(parts)


def test_one_ranged_get_from_any_byte(s3_endpoint, s3_object):
    fs, path, data = s3_object
    for start in (0, 77_777, len(data) - 1, len(data)):
        s3_endpoint.reset_counts()
        r = objectread.open_at(fs, path, start, block_size=8192)
        assert isinstance(r, objectread.HttpGet)
        assert _all(r) == data[start:]
        assert s3_endpoint.ranges == [(f"/{path}", f"bytes={start}-")]  # one request, however many reads


def test_missing_is_file_not_found_and_a_5xx_names_no_credential(s3_endpoint, s3_object):
    fs, path, _ = s3_object
    with pytest.raises(FileNotFoundError):
        objectread.open_at(fs, path + "-absent", 0, 8192)
    s3_endpoint.fail_gets(path, times=1, status=503)
    with pytest.raises(OSError, match="HTTP 503") as e:
        objectread.open_at(fs, path, 0, 8192)
    text = str(e.value) + repr(e.value.args)
    assert "Signature" not in text and "Credential" not in text and "testing" not in text


def test_a_cut_connection_is_an_error_after_the_bytes_that_came(s3_endpoint, s3_object):
    from tests.conftest import CuttingProxy

    fs0, path, data = s3_object
    proxy = CuttingProxy(s3_endpoint.port, after=60_000, cuts=1)
    try:
        fs = fsspec.filesystem("s3", **dict(s3_endpoint.storage_options, endpoint_url=proxy.url), skip_instance_cache=True)
        r = objectread.open_at(fs, path, 0, 8192)
        got = r.read(len(data))  # what arrived before the cut (headers took some of it)
        assert 0 < len(got) < 60_000 and got == data[: len(got)]
        with pytest.raises(ConnectionError, match="closed"):
            r.read(len(data))
        r.close()
    finally:
        proxy.stop()


@pytest.mark.parametrize("options", [{"requester_pays": True}, {"s3_additional_kwargs": {"ServerSideEncryption": "AES256"}},
                                     {"client_kwargs": {"verify": False}}])
def test_request_options_a_signed_get_would_drop_keep_the_filesystems_own_reads(s3_endpoint, s3_object, options):
    _, path, data = s3_object
    fs = fsspec.filesystem("s3", **s3_endpoint.storage_options, **options, skip_instance_cache=True)
    assert objectread.direct_url(fs, path) is None
    s3_endpoint.reset_counts()
    r = objectread.open_at(fs, path, 1234, block_size=65_536)
    assert not isinstance(r, objectread.HttpGet)
    assert _all(r) == data[1234:]
    assert s3_endpoint.count("GET") >= 1
