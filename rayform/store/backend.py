"""The filesystem behind a store, and its failures said in one line: what fsspec is asked
for a URL, how a backend's exception reads to a user, and a URL fit to show (no password)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import fsspec

from rayform.errors import InvalidInput, StoreError


def redact(url: str) -> str:
    """A URL fit for messages and logs: any user:password part removed."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        if parts.port:
            host += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=host))
    return url


# Object stores whose fsspec filesystem keeps every listing it made and answers later lookups
# from it (``exists``, ``info``, the size ``cat_file`` asks first): a ref another process wrote
# since reads as "not found" for the life of the process, and a gc walking the refs passes over
# it. A store's answers must be the store's as it is now, so these listings are never kept.
_LISTINGS_KEPT = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss"}
# s3fs asks an object's size (one more request) before reading it whole, to read a large one in
# parallel parts; a store reads whole only refs and blobs it holds in memory
_WHOLE_READ = {"s3": {"max_concurrency": 1}, "s3a": {"max_concurrency": 1}}


def filesystem(url: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    if urlsplit(url).scheme in _LISTINGS_KEPT:
        storage_options = {"use_listings_cache": False, **storage_options}
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        return fs, str(root)
    except ImportError as e:
        raise InvalidInput(f"store {redact(url)}: its filesystem is not installed ({e}). "
                           "For s3:// run: pip install 'rayform[s3]'") from None
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"store {redact(url)}: not a store URL fsspec can open ({e})") from None


def whole_read_options(protocol: str) -> dict[str, Any]:
    """What ``cat_file`` is given to read an object whole in one request."""
    return _WHOLE_READ.get(protocol, {})


def store_error(display: str, doing: str, e: BaseException) -> StoreError:
    """One line for a failure of the store's backend (credentials, permissions, network)."""
    kind = type(e).__name__
    text = str(e).split("\n", 1)[0][:200]
    fix = {
        "NoCredentialsError": "set AWS credentials (env, ~/.aws, or storage options key/secret)",
        "PermissionError": "check the credentials and the bucket's permissions",
        "EndpointConnectionError": "check the endpoint URL and the network",
        "ClientConnectorError": "check the endpoint URL and the network",
        "ConnectionError": "check the endpoint URL and the network",
    }.get(kind, "check the store URL, credentials and network")
    return StoreError(f"{display}: {doing} ({kind}: {text}). {fix[0].upper() + fix[1:]}")
