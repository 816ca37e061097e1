"""A pack, as stored: its parameters (spec), how its samples are laid out (layout), its
manifest and offset index (manifest: written and read there), its clock (grid: the instants of
its samples, their history and their future), its statistics (stats), and the packs a store
holds and which one serves an ask (packs). Both the packer and the readers import this
package; it imports neither."""

from rayform.pack.manifest import Pack, ShardInfo
from rayform.pack.packs import Packs
from rayform.pack.spec import PackSpec

__all__ = ["Pack", "PackSpec", "Packs", "ShardInfo"]
