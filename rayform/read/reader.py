"""Sample i's members by offset, out of memory-mapped shards.

The offset index and the shards are memory-mapped, never copied into the process, so a
DataLoader worker's memory stays flat however large the slice is: pages are the OS's page
cache, shared by every worker. Whole shards come into the cache on first use (remote
stores; ``fetch`` brings one ahead of use); samples are then read by offset, so no tar
header is parsed (Python's tarfile costs about 80 µs a member, a quarter of a first
epoch's time on small images); the tar layout is there for every other reader.

A mapped shard of a cache is pinned (``ShardCache.pin``): no eviction deletes it while it
is mapped here. At most ``MAX_MAPS`` stay mapped (least recently used dropped first), and
a streaming reader drops each as soon as it is through with it (``release``).

Mapped pages count in a process's RSS (monitors and cgroup limits see them) although they
are the page cache's: a random reader over a large slice would end up with the whole slice
resident. So once the process's mapped file pages (``RssFile``) have grown by
``RAYFORM_READER_RESIDENT`` (32 MiB: ``config.reader_resident``, read when a reader opens in a
process) since the last drop, the maps' pages are dropped from the process
(``drop_pages``; they stay cached). A random reader
(``whole_shards=False``, as ``EpisodeDataset``'s) and a streaming one alike map a page only
when it is read (``MAP_POPULATE`` of a whole shard put all of it in the reader's RSS at once:
a 66 MB shard of a large slice was 60 MB more in a worker, between one page drop and the
next).

Verification: a shard is hashed whole before its first use (once per file version for all
processes: ``marks.verify_once``), except where a random reader reads a local store's shard
of a pack with chunk digests: there each 1 MiB chunk a sample spans is hashed before the
sample is built (``ChunkCheck``), so a first batch over a large slice hashes megabytes, not
the gigabytes of every shard it touches.

Everything opened is owned by the process that opened it: after a fork, the child drops
the parent's maps and opens its own on first use.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rayform import config
from rayform.cache import marks
from rayform.cache.arrival import Arrival
from rayform.cache.eviction import Pin
from rayform.cache.store_view import CachedStore, StoreRef
from rayform.cache.transfer import FetchRequest
from rayform.codec import records
from rayform.errors import BlobNotFound, IntegrityError, Malformed, OfflineError, StoreError, fixed_by
from rayform.pack.layout import CLIPS, INDEX_LEAD
from rayform.pack.manifest import Pack
from rayform.read.chunk_check import ChunkCheck
from rayform.read.resident import resident_file_bytes

MAX_MAPS = 256  # shards kept mapped (and pinned) per reader; each costs a file descriptor
FAULT_AROUND = 2 << 20  # what one read may map: the page cache maps whole folios, up to 2 MiB
PIN_TRIES = 3  # a shard evicted by another process between its fetch and its pin is fetched again


class PackReader:
    """Picklable: it carries how to reopen its store and nothing that is open."""

    def __init__(self, store: CachedStore | StoreRef, pack: Pack, members: list[str], *, whole_shards: bool = True):
        self._store_ref = store.ref if isinstance(store, CachedStore) else store
        self.pack = pack
        self.members = members
        self._cols = [pack.member_column(m) for m in members]
        self._clips = CLIPS in members
        # reading shards through (streaming), or a few samples of many shards (random access:
        # a local store's shards are then verified by the chunks read, ``ChunkCheck``)
        self.whole_shards = whole_shards
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._store: CachedStore | None = None
        self._index: np.ndarray | None = None
        self._chunks: bytes | None = None
        self._maps: OrderedDict[int, tuple[mmap.mmap, Pin | None]] = OrderedDict()
        self._index_map: mmap.mmap | None = None
        self._chunked: dict[int, ChunkCheck] = {}  # shards of a local store verified chunk by chunk as read
        self._arrivals: dict[int, Arrival] = {}  # shards read while they arrive
        self._read = 0  # bytes read through the maps since their pages were last dropped (an upper bound)
        # mapped file pages (RssFile; where the OS does not say, the reads' upper bound) this
        # process may gain before the maps' pages are dropped from its resident set (madvise
        # DONTNEED: they stay in the page cache), so RSS as a monitor or a cgroup sees it stays
        # bounded however large the slice; 0 never drops
        self._resident = config.reader_resident()
        self._resident_base: int | None = None  # this process's RssFile just after that drop

    def __getstate__(self) -> dict[str, Any]:
        return {"_store_ref": self._store_ref, "pack": self.pack, "members": self.members, "_cols": self._cols,
                "_clips": self._clips,
                "whole_shards": self.whole_shards}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __len__(self) -> int:
        return self.pack.samples

    def _owned(self) -> None:
        if os.getpid() != self._pid:  # forked: nothing of the parent's is used here
            self._reset()

    @property
    def store(self) -> CachedStore:
        self._owned()
        if self._store is None:
            self._store = self._store_ref.open()
        return self._store

    @property
    def index(self) -> np.ndarray:
        """The offset index, memory-mapped once its header has been checked against the pack."""
        self._owned()
        if self._index is None:
            path = self._local(self.pack.index_blob, "index")
            self._index_map, self._index = _map_index(path, (self.pack.samples, self.pack.index_columns),
                                                      f"index {self.pack.index_blob[:16]} of {self.pack.slice_id}")
        return self._index

    def chunk_digests(self) -> bytes | None:
        """The sha256 of every chunk of every shard (32 bytes each), or None for an older pack."""
        self._owned()
        if self._chunks is None and self.pack.chunk_blob is not None:
            with self.offline_fix():
                data = self.store.get_blob(self.pack.chunk_blob, self.what("chunk digests", self.pack.chunk_blob))
            if len(data) != 32 * self.pack.chunk_count:
                raise Malformed(f"{self.pack.slice_id}: chunk digests {self.pack.chunk_blob[:16]} hold "
                                f"{len(data)} bytes for {self.pack.chunk_count} chunks")
            self._chunks = data
        return self._chunks

    def shard_chunks(self, shard: int) -> bytes | None:
        """The chunk digests of one shard, or None for an older pack."""
        chunks = self.chunk_digests()
        if chunks is None:
            return None
        span = self.pack.chunks_of(shard)
        return chunks[32 * span.start : 32 * span.stop]

    def rows(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Index rows of samples ``ids``, each checked to lie inside its shard (the index is
        untrusted: a row pointing past its shard is refused before a byte is read)."""
        wanted = np.asarray(ids, np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= self.pack.samples):
            raise IndexError(f"{self.pack.slice_id}: sample ids outside 0..{self.pack.samples - 1}")
        rows = np.asarray(self.index[wanted])
        _check_rows(rows, self.pack.shard_bytes, self.pack.index_columns, f"index of {self.pack.slice_id}",
                    self.pack.index_lead)
        return rows

    def shard_of(self, indices: np.ndarray) -> np.ndarray:
        shard = np.asarray(self.index[indices, 0])
        if len(shard) and (shard.min() < 0 or shard.max() >= len(self.pack.shards)):
            raise Malformed(f"index of {self.pack.slice_id}: a row names a shard outside 0..{len(self.pack.shards) - 1}")
        return shard

    def fetch(self, shard: int, arrival: Arrival | None = None) -> Path:
        """Bring shard ``shard`` into the cache chunk by chunk (its verified local copy if it is
        there), tried again as the store's ``retry`` says; ``arrival``: see ``CachedStore.fetch``."""
        info = self.pack.shards[shard]
        request = FetchRequest(info.sha256, info.bytes, self.what(f"shard {shard}", info.sha256),
                               self.shard_chunks(shard), self.pack.chunk_bytes, self.store.retry)
        with self.offline_fix():
            return self.store.fetch(request, arrival)

    def pinned(self, shard: int, fetch: bool = False, arrival: Arrival | None = None) -> tuple[Path, Pin | None]:
        """A verified local copy of the shard and, in a cache, a pin holding it there: with
        ``fetch``, fetched as ``fetch`` does (and ``arrival``), else whole (``local_blob``).
        Another process may evict a copy between its arrival and its pin: it is then fetched
        again, ``PIN_TRIES`` times."""
        digest = self.pack.shards[shard].sha256
        cache = self.store.cache
        for attempt in range(PIN_TRIES):
            path = self.fetch(shard, arrival if not attempt else None) if fetch else \
                self._local(digest, f"shard {shard}")
            if cache is None:
                return path, None
            pin = cache.pin(digest)
            if pin is not None:
                return path, pin
        raise StoreError(f"{self.what(f'shard {shard}', digest)}: evicted from {cache} as soon as it was fetched, "
                         f"{PIN_TRIES} times. Raise the cache limit (RAYFORM_CACHE_LIMIT) above what is read at once")

    def arriving(self, shard: int, arrival: Arrival) -> None:
        """Read ``shard`` from its copy while it arrives: each sample once its bytes are verified
        (``Arrival``; a streaming reader's ``FetchAhead`` begins it)."""
        self._owned()
        if shard not in self._maps:
            self._arrivals[shard] = arrival

    def shard_map(self, shard: int) -> mmap.mmap:
        self._owned()
        held = self._maps.get(shard)
        if held is not None:
            self._maps.move_to_end(shard)
            return held[0]
        arrival = self._arrivals.get(shard)
        if arrival is not None and arrival.fd is not None:
            size = os.fstat(arrival.fd).st_size
            if size != arrival.size:  # another pack's word on this shard's size
                info = self.pack.shards[shard]
                raise IntegrityError(f"{self.what(f'shard {shard}', info.sha256)}: its copy arriving in the cache is "
                                     f"{size} bytes, the pack says {arrival.size}")
            return self._keep(shard, mmap.mmap(arrival.fd, arrival.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ),
                              None)
        if self._by_chunks():
            return self._map_by_chunks(shard)
        path, pin = self.pinned(shard)
        if pin is not None and pin.fd is not None:
            m = _map_file(pin.fd)  # the pinned file itself, whatever the path names by now
        else:
            with open(path, "rb") as f:
                m = _map_file(f.fileno())
        return self._keep(shard, m, pin)

    def _keep(self, shard: int, m: mmap.mmap, pin: Pin | None) -> mmap.mmap:
        """Hold a new map of ``shard``, releasing the least recently used beyond ``MAX_MAPS``."""
        self._maps[shard] = (m, pin)
        while len(self._maps) > MAX_MAPS:
            self.release(next(iter(self._maps)))
        return m

    def _by_chunks(self) -> bool:
        """Random reads of a local store's shards: verify the chunks read, not whole shards
        first (a first batch would hash dozens of whole shards in every new worker)."""
        return not self.whole_shards and self.store.cache is None and self.chunk_digests() is not None

    def _map_by_chunks(self, shard: int) -> mmap.mmap:
        info = self.pack.shards[shard]
        what = self.what(f"shard {shard}", info.sha256)
        path = self.store.blob_file(info.sha256)
        try:
            with open(path, "rb") as f:
                stamp = marks.stamp_of(path)
                size = os.fstat(f.fileno()).st_size
                if size != info.bytes:
                    raise IntegrityError(f"{what}: {size} bytes in {self.store.display}, the pack says {info.bytes}. "
                                         "The stored copy is corrupt")
                m = _map_file(f.fileno())
        except (FileNotFoundError, NotADirectoryError):
            raise BlobNotFound(f"{what}: not in {self.store.display}") from None
        if not marks.known_good(path, info.sha256, stamp):
            chunks = self.shard_chunks(shard)
            assert chunks is not None
            self._chunked[shard] = ChunkCheck(path, info.sha256, stamp, chunks, self.pack.chunk_bytes, info.bytes, what)
        return self._keep(shard, m, None)

    def release(self, shard: int) -> None:
        """Unpin and unmap a shard (the map closes once no sample still views it)."""
        self._chunked.pop(shard, None)
        self._arrivals.pop(shard, None)
        held = self._maps.pop(shard, None)
        if held is not None and held[1] is not None:
            held[1].release()

    def raw(self, i: int) -> tuple[str, dict[str, Any]]:
        """Sample ``i``'s key and its members as zero-copy views into the shard."""
        return self.raw_many([i])[0]

    def raw_many(self, ids: Sequence[int] | np.ndarray) -> list[tuple[str, dict[str, Any]]]:
        """``raw`` for many samples, reading their index rows in one go."""
        found = self.rows(ids)
        # a page fault maps the pages around it too (fault-around, large page-cache folios), so a
        # small read is counted as what it may map
        self._read += int(np.maximum(found[:, 2] - found[:, 1], FAULT_AROUND).sum()) + FAULT_AROUND * len(found)
        if self._resident and self._read > self._resident:
            self._bound_resident()
        rows = found.tolist()
        out = []
        for i, row in zip(ids, rows):
            arrival = self._arrivals.get(row[0])
            if arrival is not None:
                arrival.wait_for(row[2])  # the sample's bytes verified (raises what ended the fetch short)
                if arrival.whole:
                    del self._arrivals[row[0]]
            view = memoryview(self.shard_map(row[0]))
            check = self._chunked.get(row[0])
            if check is not None and check.read(row[1], row[2]):
                del self._chunked[row[0]]  # every chunk verified: the whole shard is
            members: dict[str, Any] = {m: view[row[c] : row[c] + row[c + 1]] for m, c in zip(self.members, self._cols)}
            if self._clips:
                members["__clip__"] = (row[0], row[1], row[3])  # its clip (shard, where it starts), its place in it
            out.append((f"{self.pack.slice_id}#{i}", members))
        return out

    def _bound_resident(self) -> None:
        """Drop the maps' pages once they may hold the resident budget: when this process's mapped
        file pages (``RssFile``) have grown by that much since the last drop, or, where the OS
        does not say, when the reads' upper bound has. (The bound counts a whole 2 MiB folio a
        read; here a read maps about 60 KiB: dropping on the bound alone dropped at every
        batch of 64, and each drop's pages were faulted in again.)"""
        now = resident_file_bytes()
        if now is None or self._resident_base is None or now - self._resident_base > self._resident:
            self.drop_pages()
        else:
            self._read = now - self._resident_base

    def drop_pages(self) -> None:
        """Drop the mapped shards' and index's pages from this process's resident set. Safe with
        views still in use: the maps are shared and read-only, so a page read again is mapped
        again from the page cache, unchanged."""
        for m, _ in self._maps.values():
            m.madvise(mmap.MADV_DONTNEED)
        if self._index_map is not None:
            self._index_map.madvise(mmap.MADV_DONTNEED)
        self._read = 0
        self._resident_base = resident_file_bytes()

    @property
    def pull(self) -> str:
        """What ``rayform pull`` needs to bring this pack into the cache."""
        return f"{self.pack.slice_id} --fps {self.pack.fps:g}"

    def what(self, thing: str, digest: str) -> str:
        """How a message names one blob of this pack, e.g. ``slc_…: shard 3 (1a2b…) at 15 fps``."""
        return f"{self.pack.slice_id}: {thing} ({digest[:16]}) at {self.pack.fps:g} fps"

    def _local(self, digest: str, thing: str) -> Path:
        with self.offline_fix():
            return self.store.local_blob(digest, self.what(thing, digest))

    def offline_fix(self) -> contextlib.AbstractContextManager[None]:
        """Offline, a blob of this pack the cache lacks comes with the command that fetches it."""
        return fixed_by(f"Run: rayform pull {self.pull}", OfflineError)


def _map_file(fd: int) -> mmap.mmap:
    # pages are mapped as they are read (a fault maps the page-cached pages around it too)
    return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)


def _map_index(path: Path, shape: tuple[int, int], what: str) -> tuple[mmap.mmap, np.ndarray]:
    """The index file memory-mapped as int64 ``shape``, after its header and size are checked."""
    with open(path, "rb") as f:
        head = f.read(records.NPY_MAX_HEADER)
        size = os.fstat(f.fileno()).st_size
        found, dtype, offset = records.npy_header(head, what)
        if found != shape or dtype != np.dtype("<i8") or size - offset != shape[0] * shape[1] * 8:
            raise Malformed(f"{what}: {found} {dtype} in {size - offset} bytes, the pack needs {shape} int64")
        m = _map_file(f.fileno())
    return m, np.frombuffer(m, "<i8", shape[0] * shape[1], offset).reshape(shape)


def _check_rows(rows: np.ndarray, shard_bytes: np.ndarray, columns: int, what: str, lead: int = INDEX_LEAD) -> None:
    """Every row: a shard that exists, a sample span inside it, every member inside the span
    (and a video pack's place in the clip: 0 … 4095)."""
    if not len(rows):
        return
    shard, start, end = rows[:, 0], rows[:, 1], rows[:, 2]
    ok = (shard >= 0) & (shard < len(shard_bytes))
    size = shard_bytes[np.where(ok, shard, 0)]
    ok &= (start >= 0) & (start <= end) & (end <= size)
    if lead > INDEX_LEAD:
        ok &= (rows[:, INDEX_LEAD] >= 0) & (rows[:, INDEX_LEAD] < 4096)
    offsets, sizes = rows[:, lead:columns:2], rows[:, lead + 1:columns:2]
    ok &= ((offsets >= start[:, None]) & (sizes >= 0) & (sizes <= end[:, None] - offsets)).all(axis=1)
    if not ok.all():
        bad = rows[int(np.flatnonzero(~ok)[0])].tolist()
        raise Malformed(f"{what}: the row {bad[:8]} points outside its shard; the pack is corrupt or hostile")
