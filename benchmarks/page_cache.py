"""What filling the page cache costs on this machine: the CPU per MB of writing new files.

A first epoch from an object store writes every shard into the shard cache: new page-cache
pages. On a VM whose freed memory is handed back to the host (virtio-balloon free page
reporting), a page never used since (or returned since) costs the guest a host-side fault
on first touch; pages freed a moment ago are reused cheaply. This writes ``--files`` new
files of ``--mb`` MB each (1 MiB writes, kept until the end) and prints each one's CPU per
MB, so that cost can be set beside a loader's.

    python benchmarks/page_cache.py [--dir DIR] [--files 6] [--mb 400]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=str(Path.home() / ".cache"), help="where to write (the shard cache's disk)")
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--mb", type=int, default=400)
    args = ap.parse_args()
    chunk = os.urandom(1 << 20)
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for i in range(args.files):
            fd = os.open(os.path.join(tmp, f"f{i}"), os.O_WRONLY | os.O_CREAT)
            try:
                c = time.process_time()
                for _ in range(args.mb):
                    os.write(fd, chunk)
                cpu = time.process_time() - c
            finally:
                os.close(fd)
            print(f"file {i + 1}: {args.mb} MB written, {1000 * cpu / args.mb:.2f} ms CPU per MB")


if __name__ == "__main__":
    main()
