"""A contact sheet: a segment's camera frames on a grid, each stamped with its time."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from rayform.recordings.segment_reader import Segment

CELL_WIDTH = 200  # pixels a frame is scaled to
LABEL = 14  # pixels of the stamp under each frame


def displayable(frame: np.ndarray) -> np.ndarray:
    """Any stored frame as ``(H, W, 3)`` uint8: colour as is, grey repeated, depth and other
    wide types stretched between their 1st and 99th percentiles."""
    if frame.dtype != np.uint8:
        values = frame.astype(np.float64)
        finite = values[np.isfinite(values)]
        lo, hi = (np.percentile(finite, [1, 99]) if finite.size else (0.0, 1.0))
        scaled = np.clip((values - lo) / max(hi - lo, 1e-12), 0, 1) * 255
        frame = np.nan_to_num(scaled).astype(np.uint8)
    if frame.ndim == 2:
        frame = frame[:, :, None]
    if frame.shape[2] == 1:
        frame = np.repeat(frame, 3, axis=2)
    return np.ascontiguousarray(frame[:, :, :3])


def contact_sheet(segment: Segment, streams: list[str] | None = None, instants: int = 12, columns: int = 4
                  ) -> Image.Image:
    """``instants`` evenly spaced times across the segment, ``columns`` to a row; at each, one
    frame of every camera (the latest at or before it), side by side, stamped
    ``<stream>  <seconds from the segment's start> s  #<frame index>``."""
    cameras = streams or sorted(n for n, s in segment.streams.items() if s.is_image)
    stamps = {n: segment.timestamps(n) for n in cameras}
    start = min(int(ts[0]) for ts in stamps.values())
    end = max(int(ts[-1]) for ts in stamps.values())
    times = np.linspace(start, end, max(1, instants)).astype(np.int64)
    heights = {n: max(1, round(CELL_WIDTH * segment.streams[n].shape[0] / max(1, segment.streams[n].shape[1])))
               for n in cameras}
    cell_h = max(heights.values()) + LABEL
    group_w = CELL_WIDTH * len(cameras) + 8
    rows = -(-len(times) // columns)
    sheet = Image.new("RGB", (group_w * min(columns, len(times)), cell_h * rows + LABEL), "white")
    draw = ImageDraw.Draw(sheet)
    draw.text((4, 1), f"{segment.site}/{segment.name}  {segment.id}@{segment.version[:8]}", fill="black")
    for k, t in enumerate(times):
        x0, y0 = (k % columns) * group_w, (k // columns) * cell_h + LABEL
        for j, name in enumerate(cameras):
            index = max(0, int(np.searchsorted(stamps[name], t, side="right")) - 1)
            frame = Image.fromarray(displayable(segment.frame_array(name, index)))
            frame = frame.resize((CELL_WIDTH, heights[name]))
            x = x0 + j * CELL_WIDTH
            sheet.paste(frame, (x, y0))
            seconds = (int(stamps[name][index]) - start) / 1e9
            draw.text((x + 2, y0 + heights[name] + 1), f"{name}  {seconds:.2f} s  #{index}", fill="black")
    return sheet
