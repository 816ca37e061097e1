"""Tools for tests that play a hostile store: forge refs and manifests with valid hashes,
rewrite a pack's shards, and prove that nothing around the cache changed."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

import rayform
from rayform.cli.main import main as cli
from rayform.codec import records
from rayform.pack.layout import clip_members
from rayform.pack.manifest import PackBlobs, ShardInfo, shard_fields
from rayform.packer.driver import index_blob
from rayform.packer.tar_writer import ShardWriter
from rayform.read.reader import PackReader
from rayform.store.bundle import MAGIC, pack_members


def tree(root: Path, skip: Path | None = None) -> dict[str, str]:
    """Every file below ``root`` (but ``skip``) -> sha256 of its bytes, symlinks by their target."""
    out = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        if skip is not None and Path(directory) == skip:
            dirs[:] = []
            continue
        for name in files:
            p = Path(directory) / name
            if skip is not None and skip in p.parents:
                continue
            out[str(p)] = "link:" + os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_cli(*args: str) -> tuple[int, str]:
    """The CLI in this process (so a loopback endpoint counts its requests): (exit code, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli(["-q", *args])
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    return code, err.getvalue()


def forge_pack(client: rayform.Client, pack: rayform.Pack, *, manifest: Callable[[dict], None] | None = None,
               member: Callable[[int, str, bytes], bytes] | None = None, index: Callable[[np.ndarray], bytes] | None = None
               ) -> rayform.Pack:
    """Replace ``pack`` in its store (same ref) by a forged one whose every hash is valid: its
    samples' members rewritten by ``member(i, name, bytes)``, its index bytes by ``index``, and
    its manifest edited in place by ``manifest``."""
    store = client.store
    m = dict(pack.manifest)
    if member is not None:
        reader = PackReader(store, pack, pack.members)
        tmp = Path(store.cache.root if store.cache else store.root) / "forge"
        tmp.mkdir(parents=True, exist_ok=True)
        shared = frozenset(clip_members(pack.schema))  # a video pack's clips: in a clip's first sample only
        writer = ShardWriter(str(tmp), pack.spec.shard_bytes if not shared else 1 << 62, pack.members,
                             m.get("chunks", {}).get("bytes"), shared)
        shards = []
        for i, (key, raw) in enumerate(reader.raw_many(range(pack.samples))):
            place = raw.pop("__clip__", (0, 0, 0))[2]
            sample = {n: b"" if n in shared and place else member(i, n, bytes(v)) for n, v in raw.items()}
            shards += writer.add(f"forged-{i:06d}", sample)
        shards += writer.finish()
        for shard in shards:
            store.put_blob_file(shard.path, shard.sha256, move=True)
        infos = [ShardInfo(s.sha256, s.bytes, s.samples) for s in shards]
        m.update(shard_fields(PackBlobs(infos, index_blob(store, shards), writer.chunk_bytes,
                                        store.put_blob(b"".join(s.chunks for s in shards)))))
    if index is not None:
        m["index"] = store.put_blob(index(np.asarray(PackReader(store, pack, pack.members).index)))
    if manifest is not None:
        manifest(m)
    digest = store.put_json_blob(m)
    store.put_ref(f"refs/packs/{pack.slice_id}/{pack.key}.json", {"manifest": digest, "spec": m.get("spec")})
    return pack


@contextlib.contextmanager
def unchanged(root: Path, cache: Path) -> Iterator[None]:
    """Asserts, on exit, that no file below ``root`` outside ``cache`` was written or deleted."""
    before = tree(root, cache)
    yield
    after = tree(root, cache)
    assert after == before, {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                             if before.get(k) != after.get(k)}


def hostile_bundles(seg) -> dict[str, bytes]:
    """Bundles a store could hold under their true names (so they hash right): each wrong inside."""
    members = {d: bytes(seg.bundle.get(d)) for d in seg.bundle.digests()}
    honest = pack_members(members)
    lying = bytearray(honest)
    lying[-1] ^= 0x01  # the last member no longer hashes to its name
    others = dict(members)
    others.pop(seg.version)  # a sound bundle without the version's manifest
    index_bytes = struct.unpack("<Q", honest[len(MAGIC):len(MAGIC) + 8])[0]
    index = records.from_npy(honest[len(MAGIC) + 8:len(MAGIC) + 8 + index_bytes], "index").copy()
    overlapping = index.copy()
    overlapping[1, 4] = 0  # the second member starts inside the first
    head = records.to_npy(overlapping)
    forged = MAGIC + struct.pack("<Q", len(head)) + head + honest[len(MAGIC) + 8 + index_bytes:]
    return {"a member not hashing to its name": bytes(lying), "the manifest absent": pack_members(others),
            "members overlapping": forged, "not a bundle": b"just some bytes"}
