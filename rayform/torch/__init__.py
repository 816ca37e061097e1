"""PyTorch datasets over rayform slices (the ``torch`` extra).

- :class:`EpisodeDataset`: map-style, random access by offset into cached shards; for
  ``DataLoader(shuffle=True)`` and ``DistributedSampler``.
"""

from rayform.torch.episode import EpisodeDataset
from rayform.torch.world import World

__all__ = ["EpisodeDataset", "World"]
