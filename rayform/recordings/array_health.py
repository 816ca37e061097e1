"""Array streams' ``constant`` elements and ``spike`` peaks (``recordings.health``'s), measured
for many episodes at once: every array of a batch laid out as the rows of one table, numpy
called once a batch rather than once an episode. An ingest of short episodes (RLDS's sixty
steps) otherwise spent more in numpy's calls than in their arithmetic.

What is measured is each episode's own, as if alone: the streams of an episode that share a
clock (RLDS's steps, a LeRobot frame's features) are a group; a group's elements that never
change over its ten or more steps are ``constant``; its ``spike`` is the largest robust z of an
element's residual from its running median of ``WINDOW`` samples (ends held), over
``MAD_TO_STD`` × the residual's median absolute deviation, at least a fiftieth of the running
median's range (a noise-free recording's residuals have no scale). Shorter groups share a table
with longer ones of their bucket (at most twice as long) by holding their last value: their
running medians, minima and maxima are what they are alone; their padded steps are left out of
every median and peak.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

WINDOW = 15  # running median of spikes: a spike of up to 7 samples stays out of its own median
MAD_TO_STD = 1.4826  # a normal distribution's standard deviation over its median absolute deviation
CONSTANT_FROM = 10  # steps: a handful proves nothing
WINDOWS_BYTES = 64 << 20  # the running median's windows, copied by its partition, at most this at once

Stream = tuple[str, np.ndarray, np.ndarray]  # name, timestamps (ns), values (one row a timestamp)
# kind, stream, value, start_ns, end_ns: ``health.Finding``'s fields
Signal = tuple[str, str, float, int, int]


def measure(episodes: Sequence[Sequence[Stream]]) -> list[list[Signal]]:
    """Each episode's ``constant`` and ``spike`` signals: per group of its streams on one clock
    (in the order their first streams come), its constant elements counted per stream with
    more than one element (a scalar constant over an episode is a setting or a flag: RLDS's
    discount), then its worst spike."""
    groups: list[tuple[int, list[Stream]]] = []
    for e, streams in enumerate(episodes):
        clocks: dict[tuple[int, int, int], list[Stream]] = {}
        for name, ts, values in streams:
            if values.dtype.kind != "b" and len(values) >= 2:
                clocks.setdefault((len(ts), int(ts[0]), int(ts[-1])), []).append((name, ts, values))
        groups += [(e, members) for members in clocks.values()]
    found: list[list[Signal]] = [[] for _ in range(len(groups))]
    buckets: dict[int, list[int]] = {}
    for g, (_, members) in enumerate(groups):
        buckets.setdefault(len(members[0][1]).bit_length(), []).append(g)
    for bucket in buckets.values():
        _measure_bucket([groups[g][1] for g in bucket], [found[g] for g in bucket])
    out: list[list[Signal]] = [[] for _ in episodes]
    for (e, _), signals in zip(groups, found):
        out[e] += signals
    return out


def _measure_bucket(groups: list[list[Stream]], found: list[list[Signal]]) -> None:
    """``measure`` for groups of similar lengths: one table, each element a row, each step a
    column (the shorter groups' last steps held to the longest's)."""
    lengths = [len(members[0][1]) for members in groups]
    n = max(lengths)
    names, widths, member_len, floating, first_col = [], [], [], [], [0]
    blocks: dict[int, list[np.ndarray]] = {}  # a length's members' values, as (steps, elements)
    for members, length in zip(groups, lengths):
        for name, _, values in members:
            flat = values.reshape(length, -1)
            names.append(name)
            widths.append(flat.shape[1])
            member_len.append(length)
            floating.append(values.dtype.kind == "f")
            first_col.append(first_col[-1] + flat.shape[1])
            blocks.setdefault(length, []).append(flat)
    cols = first_col.pop()
    col_len = np.repeat(member_len, widths)
    table = np.empty((cols, n))
    if len(blocks) == 1:  # one length (the usual batch): one copy
        table[:] = np.concatenate(blocks[n], axis=1).T
    else:
        for length, flats in blocks.items():
            rows = np.flatnonzero(col_len == length)  # a length's members come in the order they were added
            part = np.concatenate(flats, axis=1).T
            table[rows, :length] = part
            table[rows, length:] = part[:, -1:]
    finite = np.isfinite(table)
    everywhere = finite.all(axis=1)
    if everywhere.all():  # the common case: no copies to leave non-finite values out
        lo, hi = table.min(axis=1), table.max(axis=1)
    else:
        with np.errstate(invalid="ignore"):
            lo = np.where(finite, table, np.inf).min(axis=1)
            hi = np.where(finite, table, -np.inf).max(axis=1)
    stuck = np.add.reduceat(hi - lo <= 0, first_col).tolist()  # a member's elements that never change
    moving = np.repeat(floating, widths) & everywhere & (hi > lo) & (col_len >= WINDOW)
    peaks = _peaks(table[moving], col_len[moving], len(blocks) > 1) if moving.any() else ([], [])
    owner = np.repeat(np.arange(len(names)), widths)[moving].tolist()
    member, peak = 0, 0
    for members, length, signals in zip(groups, lengths, found):
        ts = members[0][1]
        best: tuple[float, int, int] | None = None  # z, step, member: the first of the largest by step
        for _ in members:
            if length >= CONSTANT_FROM and stuck[member] and widths[member] > 1:
                signals.append(("constant", names[member], float(stuck[member]), int(ts[0]), int(ts[-1])))
            while peak < len(owner) and owner[peak] == member:
                z, step = peaks[0][peak], peaks[1][peak]
                if best is None or z > best[0] or (z == best[0] and step < best[1]):
                    best = (z, step, member)
                peak += 1
            member += 1
        if best is not None and best[0] > 0:
            signals.append(("spike", names[best[2]], best[0], int(ts[best[1]]), int(ts[best[1]])))


def _peaks(x: np.ndarray, length: np.ndarray, ragged: bool) -> tuple[list[float], list[int]]:
    """Each row's largest robust z of its residual from its running median, and at which step,
    over its first ``length`` steps (``ragged``: the lengths differ). Rows a few at a time where
    their windows would take more than ``WINDOWS_BYTES`` (the partition copies them)."""
    rows = max(1, WINDOWS_BYTES // (x.shape[1] * WINDOW * x.itemsize))
    if len(x) > rows:
        peaks: list[float] = []
        steps: list[int] = []
        for i in range(0, len(x), rows):
            part = _peaks(x[i:i + rows], length[i:i + rows], ragged)
            peaks += part[0]
            steps += part[1]
        return peaks, steps
    pad = WINDOW // 2
    padded = np.concatenate([x[:, :1].repeat(pad, axis=1), x, x[:, -1:].repeat(pad, axis=1)], axis=1)
    # each step's window a view, one partition for them all: an odd window's middle is its median
    smooth = np.partition(sliding_window_view(padded, WINDOW, axis=1), pad, axis=-1)[..., pad]
    real = np.arange(x.shape[1]) < length[:, None] if ragged else None
    if real is None:
        span = smooth.max(axis=1) - smooth.min(axis=1)
    else:
        span = np.where(real, smooth, -np.inf).max(axis=1) - np.where(real, smooth, np.inf).min(axis=1)
    r = x - smooth
    dev = np.abs(r - _medians(r, length, real)[:, None])
    scale = np.maximum(MAD_TO_STD * _medians(dev, length, real), 0.02 * span)
    if real is not None:
        dev[~real] = 0.0
    # most residuals 0 (a scale of 0): the mean absolute deviation, so one outlier is still finite
    scale = np.where(scale > 0, scale, dev.sum(axis=1) / length)
    z = np.divide(dev, scale[:, None], out=np.zeros_like(dev), where=scale[:, None] > 0)
    step = z.argmax(axis=1)
    return np.take_along_axis(z, step[:, None], axis=1)[:, 0].tolist(), step.tolist()


def _medians(x: np.ndarray, length: np.ndarray, real: np.ndarray | None) -> np.ndarray:
    """Each row's median over its first ``length`` steps (no NaN here): one partition for a
    table of one length, one sort (the padding sorted last) for a ragged one."""
    n = x.shape[1]
    if real is None:
        if n % 2:
            middle: np.ndarray = np.partition(x, n // 2, axis=1)[:, n // 2]
            return middle
        both = np.partition(x, (n // 2 - 1, n // 2), axis=1)
        return (both[:, n // 2 - 1] + both[:, n // 2]) / 2
    ordered = np.sort(np.where(real, x, np.inf), axis=1)
    low = np.take_along_axis(ordered, ((length - 1) // 2)[:, None], axis=1)[:, 0]
    high = np.take_along_axis(ordered, (length // 2)[:, None], axis=1)[:, 0]
    return (low + high) / 2  # type: ignore[no-any-return]
