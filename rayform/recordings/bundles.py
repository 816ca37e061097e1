"""Bundles as a segment reads them: each one mapped once per process, verified as a whole
once (``CachedStore.local_blob``: a remote store's copy comes into the cache), its members
then verified one by one as they are read (``store.bundle.Bundle``)."""

from __future__ import annotations

import mmap
import threading
from collections import OrderedDict

from rayform.cache.store_view import CachedStore
from rayform.store.bundle import Bundle

MAPPED = 64  # bundles a process keeps mapped (a map costs address space, not memory)
_OPEN: OrderedDict[tuple[str, str], Bundle] = OrderedDict()
_LOCK = threading.Lock()


def open_bundle(store: CachedStore, digest: str) -> Bundle:
    """The bundle ``digest`` of ``store``, mapped (once per process and store)."""
    key = (store.id, digest)
    with _LOCK:
        found = _OPEN.get(key)
        if found is not None:
            _OPEN.move_to_end(key)
            return found
    path = store.local_blob(digest, f"bundle {digest[:16]}")
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if path.stat().st_size else b""
    bundle = Bundle(digest, data)
    with _LOCK:
        _OPEN[key] = bundle
        while len(_OPEN) > MAPPED:
            _OPEN.popitem(last=False)
    return bundle
