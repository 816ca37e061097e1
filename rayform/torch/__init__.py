"""PyTorch datasets over rayform slices (the ``torch`` extra).

- :class:`EpisodeDataset`: map-style, random access by offset into cached shards; for
  ``DataLoader(shuffle=True)`` and ``DistributedSampler``.
- :class:`ClipBatchSampler`: an ``EpisodeDataset``'s clip-aware order as a batch sampler
  (``DataLoader(dataset, batch_sampler=...)``): a video pack's clips decoded once.
- :class:`StreamingEpisodeDataset`: an ``IterableDataset`` that streams shards straight
  from object storage, split by rank and worker, with an epoch-seeded shuffle buffer.
"""

# numpy imports these on first use (np.unique asks numpy.ma; the order draws with numpy.random):
# imported with the datasets, every DataLoader worker forked from here has them, rather than each
# importing them (~20 ms) before its first batch of its first epoch
import numpy.ma
import numpy.random  # noqa: F401

from rayform.sample.spec import Action, SampleSpec
from rayform.store.retry import Retry
from rayform.torch.clip_sampler import ClipBatchSampler
from rayform.torch.episode import EpisodeDataset
from rayform.torch.streaming import ShuffleConfig, StreamingEpisodeDataset
from rayform.torch.world import Split, World

__all__ = ["Action", "ClipBatchSampler", "EpisodeDataset", "Retry", "SampleSpec", "ShuffleConfig", "Split",
           "StreamingEpisodeDataset", "World"]
