"""objectread: a stored object read front to back from a byte offset (filesystems that cannot sign)."""

from __future__ import annotations

import os

import fsspec
import pytest

from rayform.store import objectread


@pytest.mark.parametrize("protocol", ["file", "memory"])
def test_a_filesystem_that_cannot_sign_is_read_through_its_file_object(tmp_path, protocol):
    fs = fsspec.filesystem(protocol)
    path = str(tmp_path / "blob") if protocol == "file" else f"/objectread-{os.getpid()}/blob"
    data = os.urandom(300_000)
    fs.pipe_file(path, data)
    assert objectread.direct_url(fs, path) is None
    for start in (0, 1, 123_457, len(data)):
        r = objectread.open_at(fs, path, start, block_size=65_536)
        got = b"".join(iter(lambda: r.read(50_000), b""))
        r.close()
        assert got == data[start:]


def test_a_missing_object_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        objectread.open_at(fsspec.filesystem("file"), str(tmp_path / "absent"), 0, 65_536)


def test_a_stalled_server_fails_the_read_after_the_timeout_given():
    """A server that accepts and never answers: the GET gives up after ``timeout_s`` (the
    streaming dataset's ``Retry(timeout_s=...)``), not after a fixed minute."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    try:
        with pytest.raises(TimeoutError):
            objectread.HttpGet(f"http://127.0.0.1:{listener.getsockname()[1]}/blob", 0, timeout_s=0.3)
    finally:
        listener.close()


def test_retry_refuses_nonsense():
    from rayform.errors import InvalidInput
    from rayform.store.retry import Retry

    for bad in ({"timeout_s": 0}, {"budget_s": -1}, {"backoff_s": float("nan")}, {"timeout_s": "1"}):
        with pytest.raises(InvalidInput):
            Retry(**bad)
