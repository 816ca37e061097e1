"""Read one stored object front to back, from a byte offset: one backend per kind of store.

A shard is read once, in order, so the fastest way to get it is one request whose body is
read as it arrives. fsspec's file objects fetch ranged blocks instead (on S3, one GET per
block: a round trip per block, and on servers that slice the object per request, the
whole object per block), through an event loop in another thread that holds the GIL for
every socket read. So:

- a store whose filesystem signs URLs (fsspec's ``sign``: s3fs, gcsfs), or a plain http(s)
  store: one HTTP GET with ``Range: bytes=<start>-`` of a short-lived signed URL (or of the
  object's own URL), read in the calling thread (the socket reads release the GIL, so
  decoding in other threads goes on);
- anything else (local, memory …, where signing fails, or where the filesystem adds request
  options of its own: requester pays, SSE-C keys, headers or auth, a custom TLS setup): its
  fsspec file object, ranged blocks of ``block_size``, seeked to ``start``.

Both give an object with ``read(n)`` (``n`` bytes, fewer only at the end) and ``close()``.
Errors are the backend's own (a missing object is ``FileNotFoundError``); retrying is the
caller's. A URL may carry credentials (a signature, a user:password): it is never logged or put in a
message.
"""

from __future__ import annotations

import hashlib
import time
import urllib.error
import urllib.request
from typing import IO, Protocol

from fsspec import AbstractFileSystem

from rayform.store.retry import HttpStatus

SIGNED_URL_SECONDS = 3600  # a URL is used for at most half of this, so a long shard never outlives it
TIMEOUT_S = 60.0  # the default; the streaming dataset's Retry(timeout_s=...) sets it
SIGNED_KEPT = 4096  # signed URLs kept per process (module-level, so forked workers find their parent's)
# (filesystem identity, path) -> (url, when it was signed): signing the first URL builds a signer
# (about 60 ms on S3), which a forked DataLoader worker would otherwise pay before its first byte
_signed: dict[tuple[str, str], tuple[str, float]] = {}


class SequentialRead(Protocol):
    def read(self, n: int = -1) -> bytes: ...  # a reader may also have readinto(buffer) -> int

    def close(self) -> None: ...


def open_at(fs: AbstractFileSystem, path: str, start: int, block_size: int, timeout_s: float = TIMEOUT_S
            ) -> SequentialRead:
    """A reader of ``path`` from byte ``start`` to its end (``timeout_s``: a stall longer than
    that fails the read, on the direct GET path)."""
    url = direct_url(fs, path)
    if url is not None:
        return HttpGet(url, start, timeout_s)
    f: IO[bytes] = fs.open(path, "rb", block_size=block_size)
    if start:
        f.seek(start)
    return f


def direct_url(fs: AbstractFileSystem, path: str) -> str | None:
    """A URL that one plain GET reads ``path`` from (signed, where the filesystem signs; an
    http(s) store's own), or None where only the filesystem's own client can make the request."""
    client_kwargs = getattr(fs, "client_kwargs", None) or {}
    if "verify" in client_kwargs:  # a custom TLS setup is the filesystem's: use its own client
        return None
    if getattr(fs, "req_kw", None) or getattr(fs, "s3_additional_kwargs", None):
        return None  # requester pays, SSE-C keys…: request options that a bare signed GET would not carry
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if {"http", "https"} & set(protocols):
        # headers, auth or client options of its own: only its client knows how to send them
        return None if (getattr(fs, "kwargs", None) or client_kwargs) else path
    key = (_identity(fs), path)
    kept = _signed.get(key)
    if kept is not None and time.time() - kept[1] < SIGNED_URL_SECONDS / 2:
        return kept[0]
    try:
        url = fs.sign(path, expiration=SIGNED_URL_SECONDS)
    except Exception:  # NotImplementedError, or credentials that cannot sign
        return None
    if not (isinstance(url, str) and url.startswith(("https://", "http://"))):
        return None
    if len(_signed) >= SIGNED_KEPT:
        _signed.clear()
    _signed[key] = (url, time.time())
    return url


def _identity(fs: AbstractFileSystem) -> str:
    """Which endpoint and credentials a filesystem signs with, the same in a forked process
    (fsspec's own token includes the pid); a hash, so no credential is kept in the key."""
    options = getattr(fs, "storage_options", None) or {}
    return hashlib.sha256(repr((type(fs).__qualname__, sorted(options.items(), key=str))).encode()).hexdigest()


class HttpGet:
    """One GET of ``url`` from byte ``start`` to the end, read as it arrives."""

    def __init__(self, url: str, start: int, timeout_s: float = TIMEOUT_S):
        self._broken = ""
        request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"})
        try:
            self._response = urllib.request.urlopen(request, timeout=timeout_s)
        except urllib.error.HTTPError as e:
            code = e.code
            e.close()
            if code == 404:
                raise FileNotFoundError("no such object") from None
            if code == 416:  # nothing from start on: an empty rest
                self._response = None
                return
            if code in (401, 403):
                raise PermissionError(f"HTTP {code} {e.reason}") from None
            raise HttpStatus(code, str(e.reason)) from None  # the URL (with its signature) stays out
        if start and self._response.status != 206:
            self._response.close()
            raise OSError(f"the server ignored the range from byte {start} (HTTP {self._response.status})")

    def read(self, n: int = -1) -> bytes:
        if self._broken:
            raise ConnectionError(self._broken)
        if self._response is None:
            return b""
        expected = self._response.length  # what Content-Length says is still to come
        data: bytes = self._response.read() if n < 0 else self._response.read(n)
        self._came(expected, len(data), expected if n < 0 else n)
        return data

    def readinto(self, buffer: memoryview) -> int:
        """``read`` into ``buffer``, with no new bytes object: how a fetch reads a shard."""
        if self._broken:
            raise ConnectionError(self._broken)
        if self._response is None:
            return 0
        expected = self._response.length
        got: int = self._response.readinto(buffer)
        self._came(expected, got, len(buffer))
        return got

    def _came(self, expected: int | None, got: int, asked: int | None) -> None:
        # http.client returns a short read, not an error, when the connection drops mid-body:
        # hand over what came (the caller resumes after it), fail on the next read.
        if expected is not None and got < min(asked if asked is not None else expected, expected):
            self._broken = f"the connection closed {expected - got} bytes before the end"
            if not got:
                raise ConnectionError(self._broken)

    def close(self) -> None:
        if self._response is not None:
            response, self._response = self._response, None
            response.close()
