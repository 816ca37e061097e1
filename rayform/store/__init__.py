"""Where bytes live: the store (blobs and refs on any fsspec filesystem), the shard cache of
verified local copies, and the cached view of a store that everything above reads through."""
