"""Packing: a slice rendered into content-addressed WebDataset shards plus a manifest."""

from rayform.pack.manifest import Pack, ShardInfo
from rayform.pack.packs import Packs
from rayform.pack.spec import PackSpec, parse_size

__all__ = ["Pack", "PackSpec", "Packs", "ShardInfo", "parse_size"]
