"""``rayform view``: a store in the browser (sites, segments, episodes played with their
plots, slices, packs and their samples), served read-only on loopback (``view.server``)."""
