"""PyTorch datasets over rayform slices (the ``torch`` extra).

- :class:`EpisodeDataset`: map-style, random access by offset into cached shards; for
  ``DataLoader(shuffle=True)`` and ``DistributedSampler``.
- :class:`StreamingEpisodeDataset`: an ``IterableDataset`` that streams shards straight
  from object storage, split by rank and worker, with an epoch-seeded shuffle buffer.
"""

from rayform.sample.spec import Action, SampleSpec
from rayform.store.retry import Retry
from rayform.torch.episode import EpisodeDataset
from rayform.torch.streaming import ShuffleConfig, StreamingEpisodeDataset
from rayform.torch.world import Split, World

__all__ = ["Action", "EpisodeDataset", "Retry", "SampleSpec", "ShuffleConfig", "Split", "StreamingEpisodeDataset",
           "World"]
