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
one process, beside the floor of any ingest that keeps every byte checked (the same files
read, hashed with SHA-256 and written, one process) and TensorFlow reading and parsing the same
records in one process (``tf.data.TFRecordDataset`` and ``tf.train.Example``), where
``--tf-python`` names a Python that has TensorFlow (the reference; rayform does not need it).

    python benchmarks/ingest.py [--copies 20] [--workers 2] [--repeats 3] [--decode-video]
    python benchmarks/ingest.py --rlds [--episodes 200] [--steps 60] [--shards 8] [--tf-python /tmp/tfenv/bin/python]

With ``--rlds --s3``: the dataset in a bucket of a real S3 endpoint on loopback (moto's server, as
the tests start it), ingested from its ``s3://`` URL on a process pool and on a Dask LocalCluster
of ``--workers`` (shards as tasks); printed too, the requests each shard cost (GET, HEAD, LIST).
TensorFlow reads the same records from local disk (it has no S3 of its own without
tensorflow-io): the reference is its best case. A row more: every object merely fetched from
the endpoint (``--workers`` threads), what the server alone allows.

    python benchmarks/ingest.py --rlds --s3 --episodes 1000 --steps 10 --shards 1000 --tf-python /tmp/tfenv/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median

import numpy as np

import rayform
import rayform.codec.imagecodec

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
    ap.add_argument("--s3", action="store_true", help="rlds: ingest from a bucket of a local S3 endpoint (moto)")
    ap.add_argument("--episode-mb", type=int, help="rlds: the peak RSS of ingesting one episode of about this size")
    args = ap.parse_args()
    if args.rlds and args.episode_mb:
        one_episode(args.episode_mb)
        return
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
        modes = [("plain copy of the files", None), ("rayform ingest (video kept)", False),
                 (OFF + " (video kept)", False)]
        if args.decode_video:
            modes.append(("rayform ingest --decode-video", True))
        times: dict[str, list[float]] = {name: [] for name, _ in modes}
        for r in range(args.repeats):
            for name, decode in modes if r % 2 == 0 else modes[::-1]:  # no mode always after the same one
                target = Path(tmp) / f"{r}-{len(times[name])}-{decode}"
                t0 = time.perf_counter()
                if decode is None:
                    for s in sources:
                        shutil.copytree(s, target / s.name)
                else:
                    client = rayform.Client(target)
                    with _signals(not name.startswith(OFF)):
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
    pairs = zip(times[OFF + " (video kept)"], times[modes[1][0]])  # each repeat's, one right after the other
    print(f"health signals on: {median(a / b for a, b in pairs):.3f}x the episodes/s of ingest without them "
          "(the median of each repeat's pair)")


def rlds(args: argparse.Namespace) -> None:
    import rlds_data
    from loader import cpu_seconds  # this process, its children reaped and its live ones (a cluster's)
    from video import real_frames

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        size = rlds_data.write(Path(tmp) / "source", real_frames(), args.episodes, args.steps, args.shards)
        source = Path(tmp) / "source" / rlds_data.NAME / "1.0.0"
        shards = sorted(str(p) for p in source.glob("*.tfrecord-*"))
        url, options, endpoint = str(source), None, None
        if args.s3:
            endpoint, url, options = _bucket(source)
            cluster = stack.enter_context(_dask(args.workers))
        # with signals and without side by side: each runs right before the other, in turn
        on, off = f"rayform ingest rlds, {args.workers} workers", f"{OFF} rlds, {args.workers} workers"
        modes = ["plain copy of the files", "rayform ingest rlds, 1 process", on, off, FLOOR]
        if args.s3:
            modes += [f"rayform ingest rlds, Dask {args.workers} workers", GETS]
        if args.tf_python:
            modes.append("TensorFlow: read + parse, 1 process" + (" (local disk)" if args.s3 else ""))
        times: dict[str, list[float]] = {m: [] for m in modes}
        requests: dict[str, list[float]] = {m: [] for m in modes}
        cpus: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.repeats):
            for m in modes if r % 2 == 0 else modes[::-1]:  # no mode always after the same one
                target = Path(tmp) / f"{r}-{modes.index(m)}"
                if endpoint is not None:
                    endpoint.reset_counts()
                t0, c0 = time.perf_counter(), cpu_seconds()
                if m.startswith("plain"):
                    shutil.copytree(source, target)
                elif m == FLOOR:
                    hashed_copy(shards, target)
                elif m == GETS:
                    fetched(url, options, args.workers)
                elif m.startswith(("rayform", OFF)):
                    executor = cluster.get_executor() if "Dask" in m else None
                    with _signals(not m.startswith(OFF)):
                        rayform.Client(target).ingest("rlds", [url], "bench",
                                                      options={"fps": 10, "storage_options": options}, executor=executor,
                                                      workers=args.workers if "workers" in m else 1, progress=False)
                else:  # TensorFlow's own timing, without its import
                    out = subprocess.run([args.tf_python, "-c", rlds_data.TF_READ, *shards], capture_output=True,
                                         text=True, check=True).stdout.split()
                    assert int(out[1]) == args.episodes * args.steps
                    t0 = time.perf_counter() - float(out[0])
                times[m].append(time.perf_counter() - t0)
                cpus[m].append(cpu_seconds() - c0)
                if endpoint is not None and m.startswith(("rayform", OFF)):
                    requests[m].append(endpoint.count() / args.shards)
                shutil.rmtree(target, ignore_errors=True)
    copy = median(times[modes[0]])
    print(f"RLDS: {args.episodes} episodes of {args.steps} steps (two 224x224 JPEG q90 cameras), {size / 1e6:.1f} MB "
          f"in {args.shards} TFRecord shards{' from S3 (moto on loopback)' if args.s3 else ''}; medians of "
          f"{args.repeats}", file=sys.stderr)
    reference = next((median(times[m]) for m in modes if m.startswith("TensorFlow")), None)
    print(f"\n{'':46} {'seconds':>8} {'episodes/s':>11} {'MB/s':>8} {'x copy time':>12} {'x TF MB/s':>10}"
          f"{' requests/shard' if args.s3 else ''}")
    for m in modes:
        t = median(times[m])
        ratio = f"{reference / t:10.2f}" if reference else f"{'':10}"
        asked = f" {median(requests[m]):15.1f}" if args.s3 and requests[m] else ""
        print(f"{m:46} {t:8.2f} {args.episodes / t:11.1f} {size / 1e6 / t:8.1f} {t / copy:12.2f} {ratio}{asked}")
    # each repeat's pair, run one right after the other, compared: the VM's drift between repeats cancels
    print(f"\nhealth signals on: {median(a / b for a, b in zip(times[off], times[on])):.3f}x the episodes/s of "
          f"ingest without them, {args.workers} workers; {median(a / b for a, b in zip(cpus[off], cpus[on])):.3f}x "
          "by the CPU of every process (medians of each repeat's pair)")


def one_episode(megabytes: int) -> None:
    """The peak RSS of an ingest (one process) of a shard holding one episode of ``megabytes``:
    what a task holds is one episode at a time, so this is its bound."""
    import rlds_data
    from video import real_frames

    frames = real_frames()
    per_step = 2 * np.mean([len(rayform.codec.imagecodec.encode_jpeg(f, 90)) for f in frames[:50]])
    steps = int(megabytes * 1e6 / per_step)
    with tempfile.TemporaryDirectory() as tmp:
        size = rlds_data.write(Path(tmp) / "source", frames, 1, steps, 1)
        source = Path(tmp) / "source" / rlds_data.NAME / "1.0.0"
        # the child's own high-water mark (VmHWM: since its exec; ru_maxrss would count the fork's copy of
        # this process), before and after the ingest
        code = ("import re, sys\nimport rayform\n"
                "hwm = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
                "before = hwm()\n"
                "rayform.Client(sys.argv[2]).ingest('rlds', [sys.argv[1]], 'bench', options={'fps': 10}, workers=1, "
                "progress=False)\nprint(before, hwm())")
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code, str(source), str(Path(tmp) / "store")], capture_output=True,
                             text=True, check=True).stdout.split()
        seconds = time.perf_counter() - started
    before, peak = int(out[0]) * 1024, int(out[1]) * 1024
    print(f"one episode of {steps} steps, {size / 1e6:.0f} MB in one shard: ingested in {seconds:.1f} s; peak RSS "
          f"{peak / 2**20:.0f} MiB, {(peak - before) / 2**20:.0f} MiB over the process before it "
          f"({(peak - before) / size:.2f}x the episode)")


OFF = "health signals off: ingest"
FLOOR = "read, sha256 and write the bytes, 1 process"
GETS = "GET every object, nothing else"


def fetched(url: str, options: dict, threads: int) -> None:
    """Every object of the dataset GET whole from the store, bytes dropped (``threads`` at
    once): what reading it from this S3 endpoint costs before anything is done with it."""
    from concurrent.futures import ThreadPoolExecutor

    import fsspec

    fs = fsspec.filesystem("s3", **options)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda key: len(fs.cat_file(key)), fs.ls(url.removeprefix("s3://"), detail=False)))


def hashed_copy(files: list[str], target: Path) -> None:
    """What any ingest that keeps every byte, checked, costs at least: each file read, hashed
    (SHA-256, the store's) and written, in pieces of 16 MiB, on one process."""
    target.mkdir(parents=True)
    for name in files:
        digest = hashlib.sha256()
        with open(name, "rb") as src, open(target / Path(name).name, "wb") as dst:
            while piece := src.read(16 << 20):
                digest.update(piece)
                dst.write(piece)


@contextlib.contextmanager
def _signals(on: bool) -> Iterator[None]:
    """Health signals measured at ingest, or not (RAYFORM_HEALTH, read by every segment's write,
    in the workers too)."""
    was = os.environ.get("RAYFORM_HEALTH")
    os.environ["RAYFORM_HEALTH"] = "on" if on else "off"
    try:
        yield
    finally:
        if was is None:
            os.environ.pop("RAYFORM_HEALTH", None)
        else:
            os.environ["RAYFORM_HEALTH"] = was


def _bucket(source: Path) -> tuple[object, str, dict]:
    """The dataset uploaded to a bucket of a fresh moto server on loopback: (endpoint, URL, options)."""
    import boto3

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import S3Endpoint  # the tests' endpoint: moto's server, counting requests

    endpoint = S3Endpoint()
    bucket = endpoint.bucket()
    s3 = boto3.client("s3", endpoint_url=endpoint.url, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    for path in source.iterdir():
        s3.upload_file(str(path), bucket, f"{rlds_data_name()}/1.0.0/{path.name}")
    return endpoint, f"s3://{bucket}/{rlds_data_name()}/1.0.0", endpoint.storage_options


def rlds_data_name() -> str:
    import rlds_data

    return rlds_data.NAME


@contextlib.contextmanager
def _dask(workers: int) -> Iterator[object]:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


if __name__ == "__main__":
    main()
