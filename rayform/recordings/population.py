"""Health signals that only an episode's site can tell, computed over catalog rows (``rayform
doctor``'s and the view's, never stored: they change as a site grows): ``duration``, a robust z of
an episode's length against its site-and-task's (median and MAD, at least ``_MIN_PEERS`` episodes),
and ``missing_stream``, a stream at least ``COMMON`` of its site's episodes have and it lacks."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from rayform.recordings import health

DURATION_Z = 8.0  # an episode this many robust deviations from its site-and-task's median length
COMMON = 0.9  # a stream this share of a site's episodes have is expected of every one
_MIN_PEERS = 8  # fewer episodes of a site and task say nothing of what is usual


def population(table: Any) -> dict[int, list[dict[str, Any]]]:
    """Findings that need the population: lengths far from their site and task's, and streams
    most of a site's episodes have that one lacks. A row that does not know its length or its
    streams (a per-segment ref's, from before catalogs) is neither counted nor judged."""
    import pyarrow.compute as pc

    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    sites = _codes(table.column("site"))
    groups = _codes(pc.binary_join_element_wise(table.column("site"), pc.fill_null(table.column("task"), ""), "\0"))
    lengths = pc.fill_null(table.column("duration_s"), np.nan).to_numpy(zero_copy_only=False)
    groups = np.where(np.isnan(lengths), -1, groups)  # unknown lengths: a group of their own, never judged
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    for members in np.split(order, bounds):
        if len(members) < _MIN_PEERS or groups[members[0]] < 0:
            continue
        mine = lengths[members]
        median = float(np.median(mine))
        scale = max(health.MAD_TO_STD * float(np.median(np.abs(mine - median))), 0.05 * median, 1e-9)
        for j in np.flatnonzero(np.abs(mine - median) / scale >= DURATION_Z):
            out[int(members[j])].append({"kind": "duration", "stream": "", "value": round(float(
                abs(mine[j] - median) / scale), 3), "start_ns": 0, "end_ns": 0, "seconds": float(mine[j]),
                "usual": round(median, 3)})
    names = table.column("stream_names")
    flat = pc.list_flatten(names)
    if not len(flat):
        return out
    known = names.is_valid().to_numpy(zero_copy_only=False)
    parents = pc.list_parent_indices(names).to_numpy(zero_copy_only=False)  # ascending: row by row
    encoded = pc.dictionary_encode(flat).combine_chunks()
    streams, vocabulary = encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary.to_pylist()
    per_site = np.bincount(sites[known], minlength=sites.max() + 1)
    pairs = np.bincount(sites[parents] * len(vocabulary) + streams, minlength=len(per_site) * len(vocabulary))
    common = (pairs.reshape(len(per_site), len(vocabulary)) >= COMMON * per_site[:, None]) & \
        (per_site[:, None] >= _MIN_PEERS)
    have = np.bincount(parents[common[sites[parents], streams]], minlength=len(sites))
    starts = np.searchsorted(parents, np.arange(len(sites)), side="left")
    ends = np.searchsorted(parents, np.arange(len(sites)), side="right")
    for i in np.flatnonzero(known & (have < common.sum(axis=1)[sites])):  # a row lacking one its site's have
        present = set(streams[starts[i]:ends[i]].tolist())
        for k in np.flatnonzero(common[sites[i]]):
            if int(k) not in present:
                out[int(i)].append({"kind": "missing_stream", "stream": vocabulary[k], "value": 1.0, "start_ns": 0,
                                    "end_ns": 0})
    return out


def _codes(column: Any) -> np.ndarray:
    """A text column's values as small integers (equal text, equal code)."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column).combine_chunks()
    codes: np.ndarray = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return codes
