"""The shard cache, a layer over a store (as fsspec layers ``filecache::`` over a filesystem):
verified local copies of a store's blobs and refs, kept within a limit, fetched and read as
they arrive, and the cached view of a store that everything above reads through."""
