"""A pack, as stored: its parameters (spec), how its samples are laid out (layout), its
manifest and offset index (manifest), and the packs a store holds (packs). Both the packer
and the readers import this package; it imports neither."""

from rayform.pack.catalog import Packs
from rayform.pack.manifest import Pack, ShardInfo
from rayform.pack.spec import PackSpec
from rayform.sizes import parse_size

__all__ = ["Pack", "PackSpec", "Packs", "ShardInfo", "parse_size"]
