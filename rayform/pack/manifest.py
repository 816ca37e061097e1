"""A stored pack: its manifest, and the per-sample offset index it names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rayform.pack.render import LOWDIM, StreamSchema
from rayform.pack.spec import PACK_FORMAT, PackSpec


@dataclass(frozen=True)
class ShardInfo:
    sha256: str
    bytes: int
    samples: int


class Pack:
    """A slice rendered at one :class:`PackSpec`: shards, schema, counts.

    The index blob is an int64 ``(samples, 3 + 2*members)`` array: shard number, sample
    start and end offsets in that shard, then ``(data offset, size)`` of each member in
    ``members`` order. Samples are numbered in shard order.
    """

    def __init__(self, digest: str, manifest: Mapping[str, Any]):
        if manifest.get("format") != PACK_FORMAT:
            raise ValueError(f"pack {digest[:12]}: format {manifest.get('format')!r}, not {PACK_FORMAT}")
        self.digest = digest
        self.manifest = dict(manifest)
        self.slice_id: str = manifest["slice"]
        self.spec = PackSpec.from_manifest(manifest["spec"])
        self.schema: dict[str, StreamSchema] = {
            n: StreamSchema.from_manifest(n, s) for n, s in manifest["schema"].items()
        }
        self.members: list[str] = list(manifest["members"])
        self.shards: tuple[ShardInfo, ...] = tuple(ShardInfo(**s) for s in manifest["shards"])
        self.index_blob: str = manifest["index"]
        self.samples: int = manifest["samples"]
        self.instants: int = manifest["instants"]
        self.dropped: dict[str, Any] = manifest["dropped"]
        self.segments: list[dict[str, Any]] = manifest["segments"]

    def __repr__(self) -> str:
        return (f"Pack({self.slice_id}, {self.spec.key()}, shards={len(self.shards)}, "
                f"samples={self.samples})")

    @property
    def fps(self) -> float:
        return self.spec.fps

    @property
    def key(self) -> str:
        return self.spec.key()

    @property
    def lowdim_member(self) -> str:
        return LOWDIM

    def member_column(self, member: str) -> int:
        """Column of ``member``'s data offset in the index (its size is the next one)."""
        return 3 + 2 * self.members.index(member)

    def blobs(self) -> list[str]:
        return [s.sha256 for s in self.shards] + [self.index_blob]
