"""Health signals' cost at ingest: what measuring an episode takes, alone and inside an ingest.

On the RLDS benchmark dataset (``rlds_data.py``: ``--episodes`` of ``--steps`` steps, two
224x224 JPEG cameras of real frames, state, action, reward, discount and the step flags), the
worst case for health's cost (short episodes: its fixed cost a segment weighs most), prints:

- the health functions an ingest calls for one episode (``recordings.health``: timing, each
  camera's frames, the streams' spans, and its arrays measured with a batch's, as the writer
  does), timed alone, medians of ``--repeats`` rounds of 4 batches, in ms an episode;
- an ingest of the dataset on one process with health on and off (``RAYFORM_HEALTH``), in
  on/off/off/on rounds (``--repeats`` of each), the process's CPU seconds (medians), and the rate
  with signals over the rate without: ``benchmarks/ingest.py`` gives the same ratio in wall time
  on a pool, where the store's writes hide part of it.

``--where DIR`` puts the dataset and the stores there (``/dev/shm``: no disk writeback in the
figures).

    python benchmarks/health.py [--episodes 200] [--steps 60] [--repeats 5] [--where /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import timeit
from pathlib import Path
from statistics import median

import numpy as np
import rlds_data
from video import real_frames

import rayform
from rayform.converters.formats import FORMATS, source_format
from rayform.recordings import health
from rayform.recordings.segment_writer import HEALTH_BATCH
from rayform.recordings.streams import ArrayStream, ImageStream


def measure_alone(streams: list, repeats: int) -> float:
    """ms an episode for the health functions an ingest calls on ``streams``."""
    stamps = {s.name: np.asarray(s.timestamps) for s in streams}
    arrays = [(s.name, stamps[s.name], np.asarray(s.values)) for s in streams if isinstance(s, ArrayStream)]
    cams = [s for s in streams if isinstance(s, ImageStream)]
    clock = next(iter(stamps.values()))

    def batch() -> None:  # as the writer calls them: the arrays of HEALTH_BATCH episodes at once
        for _ in range(HEALTH_BATCH):
            health.timing("clock", clock)
            for cam in cams:
                health.frames(cam.name, stamps[cam.name], cam.frames)
            health.spans(stamps)
        health.arrays_of_episodes([arrays] * HEALTH_BATCH)

    return median(timeit.timeit(batch, number=4) / (4 * HEALTH_BATCH) * 1e3 for _ in range(repeats))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--where", help="the folder for the dataset and the stores (default: the system's temporary one)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(dir=args.where))
    try:
        rlds_data.write(tmp / "source", real_frames(), args.episodes, args.steps, max(1, args.episodes // 25))
        source = tmp / "source" / rlds_data.NAME / "1.0.0"
        options = source_format("rlds").options_of({"fps": 10})
        _, streams, _ = next(iter(FORMATS["rlds"].episodes(str(source), options)))
        alone = measure_alone(streams, args.repeats)
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        for r, mode in enumerate(["on", "off", "off", "on"] * ((args.repeats + 1) // 2)):
            os.environ["RAYFORM_HEALTH"] = mode
            t0 = time.process_time()
            rayform.Client(tmp / f"store{r}").ingest("rlds", [str(source)], "bench", options={"fps": 10}, workers=1,
                                                      progress=False)
            cpu[mode].append(time.process_time() - t0)
            shutil.rmtree(tmp / f"store{r}")
    finally:
        os.environ.pop("RAYFORM_HEALTH", None)
        shutil.rmtree(tmp, ignore_errors=True)
    on, off = median(cpu["on"]), median(cpu["off"])
    print(f"RLDS: {args.episodes} episodes of {args.steps} steps, two JPEG cameras; in {args.where or 'the temporary folder'}")
    print(f"health functions alone:      {alone:.3f} ms an episode")
    print(f"ingest CPU, health on:       {on / args.episodes * 1e3:.3f} ms an episode")
    print(f"ingest CPU, health off:      {off / args.episodes * 1e3:.3f} ms an episode")
    # on/off/off/on: each on run beside an off one; the pairs' ratios cancel the VM's drift between them
    print(f"rate with signals / without: {median(b / a for a, b in zip(cpu['on'], cpu['off'])):.3f}x "
          f"(the median of adjacent pairs; {off / on:.3f}x of the medians)")


if __name__ == "__main__":
    main()
