"""What the store-wide commands do: ``push`` (a slice to another store), ``pull`` (into the
cache), ``gc`` (blobs no ref reaches), ``verify`` (re-hash a slice and its packs)."""
