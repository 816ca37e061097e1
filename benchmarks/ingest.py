"""Ingest benchmark: LeRobot datasets into a store, against a plain copy of the same files.

The real LeRobot v3.0 example (../shared/data/real) copied ``--copies`` times (each copy a
dataset of its own, as a collection's sites or days are), then, in one run and ``--repeats``
times each (medians):

- a plain copy of those files into a fresh folder (``shutil.copytree``: the I/O bound);
- ``rayform ingest lerobot`` of them into a fresh local store (video kept as recorded), on a
  process pool of ``--workers`` (each task writes its episodes' blobs to the store itself);
- with ``--decode-video`` too: the same with the videos decoded to JPEG frames (the old way).

Printed: episodes/s and MB/s (of source bytes) each, and ingest over copy.

With ``--rlds``: an RLDS dataset in TFDS's layout instead (``rlds_data.py``: ``--episodes`` of
``--steps`` steps, two 224x224 JPEG cameras of real frames, in ``--shards`` TFRecord shards),
and the same rows for ``rayform ingest rlds`` (images kept as recorded) on ``--workers`` and on
one process, beside TensorFlow reading and parsing the same records in one process
(``tf.data.TFRecordDataset`` and ``tf.train.Example``), where ``--tf-python`` names a Python
that has TensorFlow (the reference; rayform does not need it).

    python benchmarks/ingest.py [--copies 20] [--workers 2] [--repeats 3] [--decode-video]
    python benchmarks/ingest.py --rlds [--episodes 200] [--steps 60] [--shards 8] [--tf-python /tmp/tfenv/bin/python]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import rayform

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "lerobot_v30_so101_ros2_example"


def files_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-video", action="store_true", help="also ingest with the videos decoded to JPEG")
    ap.add_argument("--rlds", action="store_true", help="an RLDS dataset instead of LeRobot's")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--tf-python", help="a Python with TensorFlow, to time its reader on the same records")
    args = ap.parse_args()
    if args.rlds:
        rlds(args)
        return

    with tempfile.TemporaryDirectory() as tmp:
        sources = []
        for i in range(args.copies):
            sources.append(Path(tmp) / "sources" / f"so101-{i:03d}")
            shutil.copytree(REAL, sources[-1])
        size = sum(files_bytes(s) for s in sources)
        episodes = 6 * args.copies
        modes = [("plain copy of the files", None), ("rayform ingest (video kept)", False)]
        if args.decode_video:
            modes.append(("rayform ingest --decode-video", True))
        times: dict[str, list[float]] = {name: [] for name, _ in modes}
        for r in range(args.repeats):
            for name, decode in modes:
                target = Path(tmp) / f"{r}-{len(times[name])}-{decode}"
                t0 = time.perf_counter()
                if decode is None:
                    for s in sources:
                        shutil.copytree(s, target / s.name)
                else:
                    client = rayform.Client(target)
                    client.ingest("lerobot", sources, "bench", options={"decode_video": decode},
                                  workers=args.workers, progress=False)
                times[name].append(time.perf_counter() - t0)
                shutil.rmtree(target, ignore_errors=True)
        stored = None
        client = rayform.Client(Path(tmp) / "measure")
        report = client.ingest("lerobot", sources[:1], "bench", workers=1, progress=False)
        stored = sum(int(client.segments.get(r.id).frame_sizes("wrist/rgb").sum()) for r in report.segments)

    copy = median(times[modes[0][0]])
    print(f"{args.copies} copies of {REAL.name}: {episodes} episodes, {size / 1e6:.1f} MB of files; "
          f"{args.workers} workers; medians of {args.repeats}", file=sys.stderr)
    print(f"\n{'':34} {'seconds':>8} {'episodes/s':>11} {'MB/s':>8} {'x copy time':>12}")
    for name, _ in modes:
        t = median(times[name])
        print(f"{name:34} {t:8.2f} {episodes / t:11.1f} {size / 1e6 / t:8.1f} {t / copy:12.2f}")
    print(f"\nvideo stored per copy: {stored / 1e6:.2f} MB of packets, as recorded")


def rlds(args: argparse.Namespace) -> None:
    import rlds_data
    from video import real_frames

    with tempfile.TemporaryDirectory() as tmp:
        size = rlds_data.write(Path(tmp) / "source", real_frames(), args.episodes, args.steps, args.shards)
        source = Path(tmp) / "source" / rlds_data.NAME / "1.0.0"
        shards = sorted(str(p) for p in source.glob("*.tfrecord-*"))
        modes = ["plain copy of the files", f"rayform ingest rlds, {args.workers} workers", "rayform ingest rlds, 1 process"]
        if args.tf_python:
            modes.append("TensorFlow: read + parse, 1 process")
        times: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.repeats):
            for m in modes:
                target = Path(tmp) / f"{r}-{modes.index(m)}"
                t0 = time.perf_counter()
                if m.startswith("plain"):
                    shutil.copytree(source, target)
                elif m.startswith("rayform"):
                    rayform.Client(target).ingest("rlds", [source], "bench", options={"fps": 10},
                                                  workers=args.workers if "workers" in m else 1, progress=False)
                else:  # TensorFlow's own timing, without its import
                    out = subprocess.run([args.tf_python, "-c", rlds_data.TF_READ, *shards], capture_output=True,
                                         text=True, check=True).stdout.split()
                    assert int(out[1]) == args.episodes * args.steps
                    t0 = time.perf_counter() - float(out[0])
                times[m].append(time.perf_counter() - t0)
                shutil.rmtree(target, ignore_errors=True)
    copy = median(times[modes[0]])
    print(f"RLDS: {args.episodes} episodes of {args.steps} steps (two 224x224 JPEG q90 cameras), {size / 1e6:.1f} MB "
          f"in {args.shards} TFRecord shards; medians of {args.repeats}", file=sys.stderr)
    print(f"\n{'':38} {'seconds':>8} {'episodes/s':>11} {'MB/s':>8} {'x copy time':>12}")
    for m in modes:
        t = median(times[m])
        print(f"{m:38} {t:8.2f} {args.episodes / t:11.1f} {size / 1e6 / t:8.1f} {t / copy:12.2f}")


if __name__ == "__main__":
    main()
