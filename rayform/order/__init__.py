"""The order of an epoch: pure functions of sizes, weights, topology, seed and epoch, no I/O:
mixtures of packs (``mixture``), an epoch's positions (``epoch``), its global batches cut by
partition, rank and worker (``partition``)."""
