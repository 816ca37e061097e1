"""Reading a pack: the index reader, which samples a reader takes (partition, order), runs
of samples streamed or read by offset, and the sample builder both datasets share."""
