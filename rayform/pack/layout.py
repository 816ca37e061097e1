"""How a pack lays out its samples: the one description the packer writes and the readers read.

A sample is the tar members of one key::

    <key>.<stream with / as .>.jpg|png|npy   one per image stream
    <key>.lowdim.mp                          the record: t_ns, index, the META fields, and per
                                             array stream its values at t + j/fps,
                                             j = 0..max_horizon ("future"), with the pad mask ("pad")

The offset index is an int64 ``(samples, 3 + 2 * members)`` array: shard number, the
sample's start and end offsets in that shard, then ``(data offset, size)`` of each member in
the pack's ``members`` order (sorted, as the tar holds them). Samples are numbered in shard order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rayform.errors import Malformed
from rayform.frames import FRAMES
from rayform.pack.spec import MAX_SIDE
from rayform.recordings.streams import stored_stream
from rayform.untrusted import dtype as checked_dtype
from rayform.untrusted import shape as checked_shape

LOWDIM = "lowdim.mp"  # ".mp": the extension webdataset decodes as msgpack
IMAGE_FORMATS = ("jpg", "png", "npy")


@dataclass(frozen=True)
class StreamSchema:
    """How one stream appears in the shards."""

    name: str
    kind: str
    member: str  # tar member extension, e.g. "cam0.rgb.jpg"
    dtype: str
    shape: tuple[int, ...]
    units: str | None = None
    names: tuple[str, ...] | None = None
    frame: str | None = None

    @property
    def format(self) -> str:
        return self.member.rsplit(".", 1)[1]

    def to_manifest(self) -> dict[str, Any]:
        return {"kind": self.kind, "member": self.member, "dtype": self.dtype, "shape": list(self.shape),
                "units": self.units, "names": list(self.names) if self.names else None, "frame": self.frame}

    @classmethod
    def from_manifest(cls, name: str, m: dict[str, Any], what: str = "pack manifest") -> StreamSchema:
        """A schema entry of a stored pack manifest, checked (it is untrusted)."""
        what, kind = stored_stream(name, m, what)
        member = m["member"]
        base = name.replace("/", ".")
        if kind == "image" and member not in {f"{base}.{fmt}" for fmt in IMAGE_FORMATS}:
            raise Malformed(f"{what}: image member {str(member)[:80]!r} is not {base}.jpg|png|npy")
        if kind != "image" and member != base:
            raise Malformed(f"{what}: member {str(member)[:80]!r} is not {base}")
        shape = checked_shape(m["shape"], what)
        if kind == "image" and (len(shape) not in (2, 3) or not all(1 <= d <= MAX_SIDE for d in shape[:2])
                                or (len(shape) == 3 and shape[2] not in (1, 3, 4))):
            raise Malformed(f"{what}: an image is (H, W[, C]) with sides of 1..{MAX_SIDE} and 1, 3 or 4 "
                            f"channels, not {shape}")
        frame = m.get("frame")
        if frame is not None and frame not in FRAMES:
            raise Malformed(f"{what}: frame {str(frame)[:20]!r} is not one of {FRAMES}")
        names = m.get("names")
        if names and not all(isinstance(n, str) for n in names):
            raise Malformed(f"{what}: names is not a list of strings")
        units = m.get("units")
        if units is not None and not isinstance(units, str):
            raise Malformed(f"{what}: units is not a string")
        return cls(name, kind, member, checked_dtype(m["dtype"], what).str, shape, units,
                   tuple(names) if names else None, frame)


META_KEYS = ("slice", "segment", "segment_version", "site")  # the record's fields a sample's meta holds
INDEX_LEAD = 3  # shard, sample start, sample end; then (offset, size) per member


def history_member(member: str, steps_back: int) -> str:
    """The member holding an image stream's frame ``steps_back`` grid steps before the
    sample's instant (``cam0.rgb.jpg`` → ``cam0.rgb.h2.jpg``); 0: the member itself."""
    if not steps_back:
        return member
    base, _, ext = member.rpartition(".")
    return f"{base}.h{steps_back}.{ext}"


def members_of(schema: Mapping[str, StreamSchema], max_history: int = 0) -> list[str]:
    """A sample's tar members, in the order the tar (and the index) holds them."""
    images = [history_member(s.member, j) for s in schema.values() if s.kind == "image" for j in range(max_history + 1)]
    return sorted(images + [LOWDIM])


def index_columns(members: Iterable[str]) -> int:
    return INDEX_LEAD + 2 * len(list(members))


def member_column(members: list[str], member: str) -> int:
    """Column of ``member``'s data offset in the index (its size is the next one)."""
    return INDEX_LEAD + 2 * members.index(member)
