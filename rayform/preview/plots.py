"""A segment's array and pose streams against time, with a pack's action chunks drawn over
them (matplotlib, without pyplot: no global state, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from rayform.preview.packed import PackedSamples
from rayform.recordings.segment_reader import Segment

CHUNKS_DRAWN = 6  # action chunks drawn per stream, evenly spaced over the segment
LEGEND_MAX = 12  # elements named in a legend; more are left unnamed


def plot_segment(segment: Segment, samples: PackedSamples | None = None) -> Figure:
    """One panel per array or pose stream: each element against seconds from the segment's
    start (lines); with ``samples``, every so many samples' action chunks (the next ``horizon``
    values at the pack's rate, padding left out) as open dots after their instant."""
    names = sorted(n for n, s in segment.streams.items() if not s.is_image)
    fig = Figure(figsize=(11, 2.6 * max(1, len(names))), layout="constrained")
    axes = fig.subplots(max(1, len(names)), 1, squeeze=False)[:, 0]
    start = min(int(segment.timestamps(n)[0]) for n in segment.streams)
    fig.suptitle(f"{segment.site}/{segment.name}  {segment.id}@{segment.version[:8]}"
                 + (f"  chunks from the {samples.fps:g} fps pack" if samples is not None else ""), fontsize=9)
    for ax, name in zip(axes, names):
        _panel(ax, segment, name, start, samples)
    axes[-1].set_xlabel("seconds from the segment's start")
    return fig


def _panel(ax: Any, segment: Segment, name: str, start: int, samples: PackedSamples | None) -> None:
    info = segment.streams[name]
    t = (segment.timestamps(name) - start) / 1e9
    values = segment.values(name).reshape(info.count, -1).astype(np.float64)
    labels = list(info.names) if info.names and len(info.names) == values.shape[1] else \
        (["x", "y", "z", "qx", "qy", "qz", "qw"] if info.kind == "pose" else [str(i) for i in range(values.shape[1])])
    colors = [f"C{i % 10}" for i in range(values.shape[1])]
    for i in range(values.shape[1]):
        ax.plot(t, values[:, i], color=colors[i], lw=1.0, label=labels[i] if i < LEGEND_MAX else None)
    if samples is not None and name in samples.chunks and len(samples.t_ns):
        chunks = samples.chunks[name].reshape(len(samples.t_ns), samples.horizon, -1)
        steps = np.arange(1, samples.horizon + 1) / samples.fps
        for k in np.unique(np.linspace(0, len(samples.t_ns) - 1, CHUNKS_DRAWN).astype(int)):
            real = ~samples.is_pad[k]
            when = (int(samples.t_ns[k]) - start) / 1e9 + steps[real]
            for i in range(min(values.shape[1], chunks.shape[2])):
                ax.plot(when, chunks[k, real, i], "o", color=colors[i], ms=3.5, mfc="white", mew=0.9)
    unit = f" [{info.units}]" if info.units else ""
    ax.set_title(f"{name}{unit}  {info.kind}, {info.count} values", fontsize=9, loc="left")
    if values.shape[1] <= LEGEND_MAX:
        ax.legend(fontsize=7, ncol=min(values.shape[1], 8), loc="upper right")
    ax.grid(alpha=0.3)


def save_figure(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    return path
