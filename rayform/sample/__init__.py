"""The training sample: what a dataset asks of it (``spec``), and how it is built from a raw
shard sample, a batch at a time (``builder``: images, low-dim columns, actions, history,
normalization), the one place both datasets share."""
