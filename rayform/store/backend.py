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


def filesystem(url: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    try:
        fs, root = fsspec.core.url_to_fs(url, **storage_options)
        return fs, str(root)
    except ImportError as e:
        raise InvalidInput(f"store {redact(url)}: its filesystem is not installed ({e}). "
                           "For s3:// run: pip install 'rayform[s3]'") from None
    except (ValueError, TypeError) as e:
        raise InvalidInput(f"store {redact(url)}: not a store URL fsspec can open ({e})") from None


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
