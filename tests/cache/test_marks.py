"""verify_once: a file is hashed once per version for every process of the cache, and any
change to its bytes, even with its mtime put back, makes it hashed again."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from rayform.cache import marks as files


@pytest.fixture
def blob(tmp_path):
    path = tmp_path / "store" / "blob"
    path.parent.mkdir()
    path.write_bytes(os.urandom(100_000))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _forget_this_process():
    files._VERIFIED.clear()  # as a new worker process starts


def _no_hashing(monkeypatch):
    def refuse(path):
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(files, "hash_file", refuse)


def test_a_file_verified_once_is_not_hashed_by_the_next_process(blob, monkeypatch):
    path, digest = blob
    assert files.verify_once(path, digest)
    _forget_this_process()
    with monkeypatch.context() as m:
        _no_hashing(m)
        assert files.verify_once(path, digest)


def test_a_changed_file_is_hashed_again_even_with_its_mtime_put_back(blob, monkeypatch):
    path, digest = blob
    assert files.verify_once(path, digest)
    st = path.stat()
    time.sleep(0.01)
    data = bytearray(path.read_bytes())
    data[5000] ^= 1
    with open(path, "r+b") as f:  # same inode, same size
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    _forget_this_process()
    assert not files.verify_once(path, digest)


def test_a_remembered_version_vouches_only_for_its_own_digest(blob, tmp_path):
    path, digest = blob
    assert files.verify_once(path, digest)
    _forget_this_process()
    other = hashlib.sha256(b"something else").hexdigest()
    assert not files.verify_once(path, other)


def test_a_cache_file_stays_verified_when_a_reader_pins_it(tmp_path, monkeypatch):
    from rayform.cache.directory import ShardCache

    cache = ShardCache(tmp_path / "cache")
    data = os.urandom(50_000)
    digest = hashlib.sha256(data).hexdigest()
    arriving = cache.writer(digest)
    arriving.write(data)
    arriving.commit("test blob")
    pin = cache.pin(digest)  # stamps the access time: the change time moves
    assert pin is not None
    pin.release()
    _forget_this_process()
    with monkeypatch.context() as m:
        _no_hashing(m)
        assert cache.copy(digest) is not None
