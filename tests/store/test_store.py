"""One contract suite for stores, run on a local directory, memory:// and real S3."""

from __future__ import annotations

import os
import uuid

import pytest

from rayform.errors import BlobNotFound, IntegrityError, NotFound
from rayform.store.content import canonical_json, sha256_hex
from rayform.store.store import Store, redact


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path) -> Store:
    if request.param == "local":
        return Store(tmp_path / "store")
    if request.param == "memory":
        return Store(f"memory://rf-{uuid.uuid4().hex}")
    url, options = request.getfixturevalue("s3_store_url")
    return Store(url, options)


def test_blob_round_trip_is_named_by_its_sha256(store):
    data = os.urandom(10_000)
    digest = store.put_blob(data)
    assert digest == sha256_hex(data)
    assert store.has_blob(digest)
    assert store.get_blob(digest) == data
    assert store.blob_size(digest) == len(data)


def test_large_blob_from_a_file(store, tmp_path):
    path = tmp_path / "big.bin"
    data = os.urandom(9 << 20)
    path.write_bytes(data)
    digest = store.put_blob_file(path)
    assert digest == sha256_hex(data)
    with store.open_blob(digest) as f:
        assert f.read() == data


def test_putting_an_existing_blob_changes_nothing(store):
    digest = store.put_blob(b"first")
    assert store.put_blob(b"first") == digest
    assert store.get_blob(digest) == b"first"


def test_missing_blob_and_ref_are_not_found(store):
    missing = sha256_hex(b"never stored")
    with pytest.raises(BlobNotFound, match=missing[:16]):
        store.get_blob(missing)
    with pytest.raises(NotFound):
        store.get_ref("refs/slices/slc_00000000.json")


def test_refs_round_trip_and_list(store):
    store.put_ref("refs/things/a.json", {"x": 1})
    store.put_ref("refs/things/sub/b.json", {"y": [1, 2]})
    assert store.get_ref("refs/things/a.json") == {"x": 1}
    assert list(store.list_refs("refs/things")) == ["refs/things/a.json", "refs/things/sub/b.json"]
    assert list(store.list_refs("refs/none")) == []
    store.put_ref("refs/things/a.json", {"x": 2})
    assert store.get_ref("refs/things/a.json") == {"x": 2}


def test_a_corrupt_blob_is_refused_and_named(tmp_path):
    store = Store(tmp_path / "store")
    digest = store.put_blob(b"precious bytes")
    path = store.blob_path(digest)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.write(b"P")
    with pytest.raises(IntegrityError, match=digest[:16]):
        store.get_blob(digest)


def test_local_writes_leave_no_temporary_files(tmp_path):
    store = Store(tmp_path / "store")
    for i in range(20):
        store.put_blob(os.urandom(100))
        store.put_ref(f"refs/r/{i}.json", {"i": i})
    leftovers = [p for p in (tmp_path / "store").rglob("*") if p.name.startswith(".tmp-")]
    assert leftovers == []


def test_canonical_json_is_independent_of_key_order():
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical_json({"a": [1, {"c": 3, "d": 2}], "b": 1})


def test_redact_drops_credentials_from_urls():
    assert redact("s3://AKIA:secret@bucket/prefix") == "s3://bucket/prefix"
    assert redact("http://user:pw@host:9000/x") == "http://host:9000/x"
    assert redact("/plain/path") == "/plain/path"


@pytest.mark.s3
def test_s3_put_of_an_existing_blob_sends_no_upload_but_freshens_it(s3_store_url, s3_endpoint):
    url, options = s3_store_url
    store = Store(url, options)
    digest = store.put_blob(b"once")
    assert "rayform-touched" not in store.fs.metadata(store.blob_path(digest))
    s3_endpoint.reset_counts()
    store.put_blob(b"once")
    # one PUT, a copy of the object onto itself (its metadata renewed), not an upload of its bytes
    assert s3_endpoint.count("PUT") == len(s3_endpoint.copies) == 1
    store.fs.invalidate_cache()
    assert "rayform-touched" in store.fs.metadata(store.blob_path(digest))
    assert store.get_blob(digest) == b"once"
