"""The client: one store, and the segments, slices and packs in it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from rayform.cache.directory import ShardCache
from rayform.cache.store_view import CachedStore
from rayform.errors import InvalidInput, raised_here
from rayform.pack import Pack, Packs, PackSpec
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice, Slices
from rayform.store.retry import Retry
from rayform.store.store import Store


class Client:
    """``rayform.Client(store=None, cache=None)``: the store named, else ``RAYFORM_STORE``, else
    the local default, read through the shard cache at ``cache``, else ``RAYFORM_CACHE_DIR``,
    else ``~/.cache/rayform`` (a local store needs none: it is its own local copy).
    ``cache_limit`` (bytes or ``"200GB"``; else ``RAYFORM_CACHE_LIMIT``) keeps that cache
    within a size: least-recently-used shards no process is reading are evicted.

    ``store`` is any fsspec URL (a directory, ``s3://bucket/prefix``, ``memory://name``) or a
    :class:`Store`; ``storage_options`` go to fsspec (for S3: ``endpoint_url``, ``key``,
    ``secret``, …). ``retry`` says how a read that meets a busy or flaky store (503 Slow Down, a
    dropped connection) is tried again: for as long as its time budget since the last byte, by
    default five minutes (:class:`Retry`). ``client.store`` is the :class:`CachedStore` that
    everything made from this client (slices, packs, datasets) reads through.
    """

    def __init__(self, store: str | os.PathLike[str] | Store | CachedStore | None = None,
                 storage_options: dict[str, Any] | None = None,
                 cache: ShardCache | str | os.PathLike[str] | None = None, cache_limit: int | str | None = None,
                 retry: Retry = Retry()):
        if cache_limit is not None:
            if isinstance(cache, ShardCache):
                raise InvalidInput("Client: give cache_limit to the ShardCache you pass, or pass a cache directory")
            cache = ShardCache(cache, cache_limit)
        if not isinstance(retry, Retry):
            raise InvalidInput(f"retry {str(retry)[:60]!r}: give a rayform.Retry(...)")
        self.store = CachedStore.open(store, storage_options, cache, retry)
        self.segments = Segments(self.store)
        self.slices = Slices(self.store)
        self.packs = Packs(self.store)

    def __repr__(self) -> str:
        return f"Client({self.store.display!r})"

    @raised_here
    def pack(
        self,
        slice_: Slice | str,
        fps: float,
        *,
        executor: Executor | None = None,
        workers: int | None = None,
        progress: bool = True,
        force: bool = False,
        **spec: Any,
    ) -> Pack:
        """Pack a slice at ``fps`` (other :class:`PackSpec` fields as keywords)."""
        if isinstance(slice_, str):
            slice_ = self.slices.get(slice_)
        from rayform.packer.driver import (
            pack_slice,  # the packer (and tqdm) only when packing
        )

        return pack_slice(slice_, PackSpec(fps=fps, **spec), executor=executor, workers=workers,
                          progress=progress, force=force)

    @raised_here
    def ingest(self, fmt: str, sources: Sequence[str | os.PathLike[str]], site: str, *,
               options: Mapping[str, Any] | None = None, slice_name: str | None = None,
               executor: Executor | None = None, workers: int | None = None, progress: bool = True) -> Any:
        """Convert ``sources`` (``"lerobot"``, ``"ros"``, ``"hdf5"`` or ``"rlds"`` recordings) into segments at
        ``site``, all or nothing, on ``executor`` (default: a process pool of ``workers``), as
        ``rayform ingest`` does; ``options`` as its flags (``mapping``, ``allow_missing``,
        ``decode_video``, ``task``, ``fps``, …: the fields of ``converters.source_options.SourceOptions``,
        a format's own checked against ``converters.formats.FORMATS``). Returns the report:
        ``.segments``, ``.slice`` (with ``slice_name``)."""
        from rayform.converters.ingest import ingest  # the converters (and their libraries) only when ingesting
        from rayform.jobs import Run

        return ingest(self, fmt, list(sources), site, options=options, slice_name=slice_name,
                      run=Run(executor, workers, progress))
