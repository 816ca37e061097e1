"""rayform's packs read by other tools: a pack's shards as a ``webdataset`` pipeline's source,
each verified before the pipeline opens it (``webdataset``)."""
