"""Making a pack: plan a slice's instants on the grid, align every stream to them, render
samples on an executor and write them as byte-identical shards, in order."""
