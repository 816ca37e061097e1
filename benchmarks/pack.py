"""Packing benchmark: how fast a slice becomes shards, against merely copying its bytes.

Workload W1 (benchmarks/loader.py's slice: two 224×224 JPEG q90 cameras, 14 joints, 15 fps,
12,274 samples). Printed in one run, medians of ``--repeats``:

- copy: one process writing the pack's own members (the recorded JPEGs and the records)
  into tar shards with the shard writer, nothing else: the floor of any packer;
- pack: ``client.pack(..., force=True)`` with the JPEGs kept as recorded, on ``--workers``
  processes (interleaved, statistics, the default);
- encode bound: one process decoding, resizing to ``--resize`` and re-encoding the same
  frames (what a resizing pack must do per image), nothing else;
- pack --resize: the same pack, resizing.

    python benchmarks/pack.py [--store DIR] [--workers 2] [--resize 112x112] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loader as bench

import rayform
from rayform.codec import imagecodec
from rayform.packer.tar_writer import ShardWriter


def pack_members(client: rayform.Client, pack: rayform.Pack) -> list[tuple[str, dict[str, bytes]]]:
    import tarfile

    out: dict[str, dict[str, bytes]] = {}
    for s in pack.shards:
        with tarfile.open(client.store.local_blob(s.sha256)) as tf:
            for ti in tf.getmembers():
                key, member = ti.name.split(".", 1)
                out.setdefault(key, {})[member] = tf.extractfile(ti).read()
    return list(out.items())


def copy_rate(samples: list[tuple[str, dict[str, bytes]]], members: list[str]) -> tuple[float, float]:
    """(samples/s, MB/s) of one process writing these members into 64 MiB tar shards."""
    with tempfile.TemporaryDirectory() as tmp:
        writer = ShardWriter(tmp, 64 << 20, members)
        t = time.perf_counter()
        for key, sample in samples:
            for shard in writer.add(key, sample):
                os.unlink(shard.path)
        for shard in writer.finish():
            os.unlink(shard.path)
        dt = time.perf_counter() - t
    nbytes = sum(len(v) for _, s in samples for v in s.values())
    return len(samples) / dt, nbytes / dt / 1e6


def encode_bound(samples: list[tuple[str, dict[str, bytes]]], size: tuple[int, int], limit: int = 1500) -> float:
    """Samples/s of one process decoding, resizing and re-encoding both cameras' frames."""
    chosen = samples[:limit]
    t = time.perf_counter()
    for _, sample in chosen:
        for member, data in sample.items():
            if member.endswith(".jpg"):
                imagecodec.encode_jpeg(imagecodec.resize(imagecodec.decode_jpeg(data), size), 90)
    return len(chosen) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=12_000)
    ap.add_argument("--store", default=str(Path.home() / ".cache" / "rayform-bench" / "store"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--resize", default="112x112")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    size = tuple(int(v) for v in args.resize.lower().split("x"))

    slice_ = bench.build_slice(args.store, args.samples)
    client = rayform.Client(args.store)
    pack = client.pack(slice_, bench.FPS, max_horizon=16, progress=False)
    samples = pack_members(client, pack)
    nbytes = sum(s.bytes for s in pack.shards)
    copies, packs, encodes, resized = [], [], [], []
    for _ in range(args.repeats):  # in turn, so that drift hits all alike
        copies.append(copy_rate(samples, pack.members)[0])
        t = time.perf_counter()
        client.pack(slice_, bench.FPS, max_horizon=16, progress=False, force=True, workers=args.workers)
        packs.append(pack.samples / (time.perf_counter() - t))
        encodes.append(encode_bound(samples, size))
        t = time.perf_counter()
        client.pack(slice_, bench.FPS, max_horizon=16, progress=False, force=True, workers=args.workers,
                    resize=size, image_codec="jpeg")
        resized.append(pack.samples / (time.perf_counter() - t))
    copy, packed, encode, packed_resized = median(copies), median(packs), median(encodes), median(resized)
    mb = nbytes / pack.samples / 1e6
    print(f"slice {slice_.id}: {pack.samples} samples, {nbytes / 1e9:.2f} GB packed; {args.workers} pack processes; "
          f"medians of {args.repeats}")
    print(f"\n{'':52} {'samples/s':>10} {'MB/s':>8} {'ratio':>7}")
    print(f"{'copy: 1 process writing the same members into tars':52} {copy:10.0f} {copy * mb:8.1f} {1:7.2f}")
    print(f"{'pack, JPEGs kept (× copy)':52} {packed:10.0f} {packed * mb:8.1f} {packed / copy:7.2f}")
    print(f"{'encode bound: 1 process decode+resize+encode':52} {encode:10.0f} {'':>8} {1:7.2f}")
    print(f"{f'pack --resize {args.resize} (× encode bound)':52} {packed_resized:10.0f} {'':>8} "
          f"{packed_resized / encode:7.2f}")
    print(f"\neach pair: copy {', '.join(f'{x:.0f}' for x in copies)}; pack {', '.join(f'{x:.0f}' for x in packs)}; "
          f"encode {', '.join(f'{x:.0f}' for x in encodes)}; resized {', '.join(f'{x:.0f}' for x in resized)}")


if __name__ == "__main__":
    main()
