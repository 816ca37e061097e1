"""The ``rayform cache`` commands: what the shard cache holds, and evicting from it."""

from __future__ import annotations

import argparse
from typing import Any

from rayform import names
from rayform.sizes import format_size


def cache(args: argparse.Namespace) -> int:
    from rayform.cache.directory import ShardCache
    from rayform.ops.pull import cache_summary

    c = ShardCache(args.cache)
    size, files = c.size()
    print(f"cache: {c.root}")
    print(f"size:  {format_size(size)} in {files} blobs")
    for store in cache_summary(c):
        print(f"store {store['store']}:")
        for s in store["slices"]:
            whole = [p for p in s["packs"] if p["have"] == p["of"]]
            state = ", ".join(f"{p['key']} {p['have']}/{p['of']}" for p in s["packs"]) or "no packs"
            mark = "whole" if whole else "partial"
            print(f"  {s['id']}  {mark:7}  {state}")
    return 0


def _evicted(what: str, found: Any, cache: Any) -> None:
    size, files = cache.size()
    kept = f"; {found.pinned} in use by a reader kept" if found.pinned else ""
    print(f"{what}: evicted {found.files} blobs ({format_size(found.bytes)}){kept}; "
          f"the cache holds {format_size(size)} in {files} blobs")


def cache_prune(args: argparse.Namespace) -> int:
    from rayform.cache.directory import ShardCache

    c = ShardCache(args.cache)
    _evicted(f"prune {c.root} to {args.to}", c.prune(args.to), c)
    return 0


def cache_clean(args: argparse.Namespace) -> int:
    from rayform.cache.directory import ShardCache
    from rayform.ops.pull import cached_blobs_of

    c = ShardCache(args.cache)
    if args.slice is None:
        _evicted(f"clean {c.root}", c.clean(), c)
        return 0
    digests = cached_blobs_of(c, names.slice_id(args.slice, "slice"))
    if not digests:
        print(f"clean {args.slice}: the cache {c.root} holds no pack of it")
        return 0
    _evicted(f"clean {args.slice}", c.clean(digests), c)
    return 0
