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


def _signed_in_child(path, options, out):
    """In a forked process: a new filesystem of the same options finds the parent's signed URL."""
    fs = fsspec.filesystem("s3", **options, skip_instance_cache=True)
    fs.sign = lambda *a, **k: (_ for _ in ()).throw(AssertionError("signed again"))
    out.put(objectread.direct_url(fs, path))


def test_a_signed_url_is_kept_and_a_forked_worker_reads_with_its_parent_s(s3_endpoint, s3_object, monkeypatch):
    """Signing a first URL builds a signer (~60 ms): a dataset signs its shards' URLs when made,
    and a DataLoader worker forked after uses them, until half their life is gone."""
    import multiprocessing

    fs, path, data = s3_object
    monkeypatch.setattr(objectread, "_signed", {})
    url = objectread.direct_url(fs, path)
    signs = []
    real_sign = fs.sign
    monkeypatch.setattr(fs, "sign", lambda *a, **k: signs.append(a) or real_sign(*a, **k))
    assert objectread.direct_url(fs, path) == url and signs == []
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_signed_in_child, args=(path, s3_endpoint.storage_options, out))
    child.start()
    assert out.get(timeout=30) == url
    child.join(10)
    assert child.exitcode == 0
    assert _all(objectread.open_at(fs, path, 0, block_size=8192)) == data
    other = fsspec.filesystem("s3", **{**s3_endpoint.storage_options, "secret": "other"}, skip_instance_cache=True)
    assert objectread._identity(other) != objectread._identity(fs)  # another key: never another's URL
    now = objectread.time.time()
    monkeypatch.setattr(objectread.time, "time", lambda: now + objectread.SIGNED_URL_SECONDS / 2 + 1)
    objectread.direct_url(fs, path)
    assert len(signs) == 1  # half its life gone: signed again
