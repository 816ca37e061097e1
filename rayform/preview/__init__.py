"""``rayform preview``: look at a slice before training on it.

Per segment: a contact sheet of camera frames stamped with time (``sheet.py``), a plot of
every array and pose stream with the pack's action chunks drawn over it (``plots.py``), an
MP4 per camera (``video.py``); for the whole slice, optionally, a Rerun recording with
images, joints, poses as transforms and the pack's sample grid (``rrd.py``). The chunks and
the grid are read from a pack (``packed.py``), so what is drawn is what training will see.

matplotlib (plots) and rerun-sdk (.rrd) are extras: ``pip install 'rayform[preview]'``,
``'rayform[rerun]'``. Nothing here is imported by ``import rayform``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PIL import Image

from rayform.errors import InvalidInput, PackNotFound
from rayform.pack import Pack, Packs
from rayform.preview.packed import PackedSamples
from rayform.preview.sheet import contact_sheet
from rayform.recordings.segment_reader import Segment
from rayform.recordings.slices import Slice

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["preview", "contact_sheet", "plot_segment", "PackedSamples"]

log = logging.getLogger("rayform")


def preview(slice_: Slice, out: str | os.PathLike[str], *, fps: float | None = None, segments: int | Sequence[str] = 4,
            video: bool = True, plots: bool = True, rerun: str | os.PathLike[str] | None = None,
            pack: str | None = None) -> list[Path]:
    """Write the preview of ``slice_`` into ``out`` (a directory, made if missing): per segment
    ``<segment id>/sheet.png``, ``plot.png`` and ``<camera>.mp4``; with ``rerun``, that
    ``.rrd`` file. ``segments``: how many of the slice's segments (the first ones), or their
    ids. ``fps``: the pack whose action chunks and sample grid are drawn (default: the one
    ``Packs.find`` would pick if the slice has packs at a single rate; none: streams only);
    ``pack``: that pack, by key. Returns the files written."""
    _needs("matplotlib" if plots else "", "av" if video else "", "rerun" if rerun is not None else "")
    chosen = _segments(slice_, segments)
    drawn = Packs(slice_.store).named(slice_, pack) if pack is not None else _pack(slice_, fps)
    packed = PackedSamples.by_segment(slice_.store, drawn, [s.id for s in chosen]) if drawn is not None else {}
    root = Path(out)
    written: list[Path] = []
    for seg in chosen:
        folder = root / seg.id
        folder.mkdir(parents=True, exist_ok=True)
        samples = packed.get(seg.id)
        if any(s.is_image for s in seg.streams.values()):
            written.append(_save_png(contact_sheet(seg), folder / "sheet.png"))
        if plots and any(not s.is_image for s in seg.streams.values()):
            from rayform.preview.plots import save_figure

            written.append(save_figure(plot_segment(seg, samples), folder / "plot.png"))
        if video:
            from rayform.preview.video import write_video

            for name, info in sorted(seg.streams.items()):
                if info.is_image:
                    written.append(write_video(seg, name, folder / f"{name.replace('/', '_')}.mp4"))
    if rerun is not None:
        from rayform.preview.rrd import write_rrd

        written.append(write_rrd(slice_, chosen, Path(rerun), packed))
    return written


def plot_segment(segment: Segment, pack: Pack | PackedSamples | None = None) -> Figure:
    """A matplotlib Figure of ``segment``'s array and pose streams, with ``pack``'s action
    chunks over them (``rayform.preview.plots``); in a notebook, the figure shows itself."""
    from rayform.preview.plots import plot_segment as plot

    if isinstance(pack, Pack):
        pack = PackedSamples.of(segment.store, pack, segment.id)
    return plot(segment, pack)


_EXTRAS = {"matplotlib": "preview", "av": "preview", "rerun": "rerun"}


def _needs(*modules: str) -> None:
    """Fail before writing anything if an extra a part of the preview needs is missing."""
    import importlib.util

    for module in filter(None, modules):
        if importlib.util.find_spec(module) is None:
            raise InvalidInput(f"preview needs {module}: pip install 'rayform[{_EXTRAS[module]}]'")


def _segments(slice_: Slice, segments: int | Sequence[str]) -> list[Segment]:
    if isinstance(segments, int):
        return [slice_.segment(i) for i in range(min(max(segments, 0), len(slice_.segments)))]
    index = {s.id: i for i, s in enumerate(slice_.segments)}
    missing = [s for s in segments if s not in index]
    if missing:
        raise InvalidInput(f"{slice_.id}: no segment {missing[0]!r} in it. Its segments: rayform slices show {slice_.id}")
    return [slice_.segment(index[s]) for s in segments]


def _pack(slice_: Slice, fps: float | None) -> Pack | None:
    packs = Packs(slice_.store)
    if fps is not None:
        return packs.find(slice_, fps, any_size=True)
    rates = sorted({float(p.fps) for p in packs.list(slice_)})
    if len(rates) > 1:  # which one is the user's to say: draw none, and say so
        log.warning("rayform: %s has packs at %s fps: no action chunks drawn. Pass --fps (fps=) to draw one's",
                    slice_.id, ", ".join(f"{r:g}" for r in rates))
    if len(rates) != 1:
        return None
    try:
        return packs.find(slice_, rates.pop(), any_size=True)
    except PackNotFound:
        return None


def _save_png(image: Image.Image, path: Path) -> Path:
    image.save(path, format="PNG")
    return path
