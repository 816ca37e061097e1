"""Metadata at collection scale: N tiny episodes (one 10-row array stream each), and for each
step the time, the objects written, the store requests and the peak RSS.

    python benchmarks/catalog.py                      # a million episodes, local store
    python benchmarks/catalog.py --s3                 # 100,000 on S3 (moto's server on loopback)
    python benchmarks/catalog.py --episodes 10000     # any N; --slope also runs N/10
    python benchmarks/catalog.py --no-pack            # the metadata steps only (no pack steps)

Steps (each in a process of its own, so its peak RSS is its own):

- ``add``: ``segments.add_many`` in batches of 500;
- ``create``: ``slices.create(site=…)``; ``query``: ``slices.create(where=…)``;
- ``ls``: ``rayform segments ls`` (time to its first segment line, and to its end);
- ``show``: ``rayform show <slice>``;
- ``doctor``: ``rayform doctor --site lab`` (one episode in a thousand has a joint stuck);
- ``view``: ``rayform view``: seconds from its start to the first page of the segment list,
  then to each of: the sites, a filtered page, the flagged only, a page sorted by duration, the next page of
  that, an episode's page and its plots; the server's peak RSS;
- ``pack``: ``client.pack`` at 10 samples an episode, 2 processes; and the same number of
  samples in N/1000 long episodes, so the difference is what episodes cost beyond samples.

Store requests are the calls rayform makes on the store's fsspec filesystem (each an HTTP
request on S3; a system call or two on a local disk), counted by wrapping it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BATCH = 500
QUERY = "task ~ 'pick' and duration > 0.5 and meta.success"
QUERY_URL = "meta.success%20and%20duration%20%3E%200.5"
FPS = 10.0


# -- inside a step's process -------------------------------------------------------------
class Counting:
    """A filesystem whose public calls are counted (``calls``), passed on as they are."""

    calls = 0

    def __init__(self, fs):
        self._fs = fs

    def __getattr__(self, name):
        value = getattr(self._fs, name)
        if callable(value) and not name.startswith("_") and name not in ("invalidate_cache", "protocol", "sep"):
            def counted(*args, **kwargs):
                Counting.calls += 1
                return value(*args, **kwargs)
            return counted
        return value


def _count_requests() -> None:
    from rayform.store import backend

    real = backend.filesystem

    def counting(url, options):
        fs, root = real(url, options)
        return Counting(fs), root

    backend.filesystem = counting
    import rayform.store.store as store_module

    store_module.filesystem = counting


def _client(store: str, options: dict):
    import rayform

    return rayform.Client(store, storage_options=options or None, cache=os.environ.get("BENCH_CACHE"))


def _episode(i: int):
    import numpy as np

    import rayform

    t = np.arange(10, dtype=np.int64) * 100_000_000
    values = (i % 1000 + np.arange(20, dtype=np.float32).reshape(10, 2) * 0.01).astype(np.float32)
    if i % 1000 == 7:  # one in a thousand with a joint stuck: what doctor finds
        values[:, 1] = 0.5
    task = "pick the cube" if i % 2 else "place the cube"
    return ("lab", f"ep-{i:08d}", [rayform.ArrayStream("joints", t, values)], {"task": task, "success": i % 3 == 0})


def step(name: str, store: str, options: dict, n: int) -> dict:
    _count_requests()
    started = time.perf_counter()
    out: dict = {}
    if name == "add":
        client = _client(store, options)
        for first in range(0, n, BATCH):
            client.segments.add_many([_episode(i) for i in range(first, min(n, first + BATCH))])
    elif name in ("create", "query"):
        client = _client(store, options)
        s = client.slices.create(site="lab", name="all") if name == "create" else \
            client.slices.create(where=QUERY, name="picked")
        out["slice"], out["segments"] = s.id, len(s.segments)
    elif name in ("pack", "pack-long"):
        client = _client(store, options)
        s = client.slices.get("all" if name == "pack" else "long")
        p = client.pack(s, FPS, workers=2, progress=False, max_horizon=2, force=True)
        out["samples"] = p.samples
    elif name == "long":  # the reference: as many samples in N/1000 episodes
        import numpy as np

        import rayform

        client = _client(store, options)
        per = 10_000
        episodes = max(1, n // 1000)
        t = np.arange(per, dtype=np.int64) * 100_000_000
        refs = client.segments.add_many([("long", f"long-{i}", [rayform.ArrayStream("joints", t, np.zeros((per, 2),
                                                                                                        np.float32))],
                                          None) for i in range(episodes)])
        client.slices.create(refs, name="long")
    out["seconds"] = time.perf_counter() - started
    out["requests"] = Counting.calls
    out["rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


# -- the driver --------------------------------------------------------------------------
def _objects(store: str, options: dict) -> int:
    import fsspec

    fs, root = fsspec.core.url_to_fs(store, **options)
    return sum(1 for _ in fs.find(root))


def _run_step(name: str, store: str, options: dict, n: int) -> dict:
    before = _objects(store, options)
    proc = subprocess.run([sys.executable, __file__, "--step", name, "--store", store, "--options", json.dumps(options),
                           "--episodes", str(n)], capture_output=True, text=True, env={**os.environ})
    if proc.returncode:
        raise SystemExit(f"step {name} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["objects"] = _objects(store, options) - before
    return out


def _cli_step(args: list[str], store: str, options: dict, ok: tuple[int, ...] = (0,)) -> dict:
    """A ``rayform`` command: seconds to its first segment line and to its end, peak RSS."""
    opts = [f"-o{k}={v}" for k, v in options.items()]
    cmd = [sys.executable, "-m", "rayform.cli.main", "--store", store, *opts, *args]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first = None
    lines = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        lines += 1
        if first is None and line.lstrip().startswith("seg_"):
            first = time.perf_counter() - started
    err = proc.stderr.read() if proc.stderr else ""
    # the command's own peak RSS, from the kernel (it ends by os._exit: nothing runs after it)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(args)} failed:\n{err[-3000:]}")
    return {"seconds": time.perf_counter() - started, "first_line": first, "lines": lines,
            "rss_mib": usage.ru_maxrss / 1024}


def _view_step(store: str, options: dict) -> dict:
    """``rayform view``: seconds to the first page of the list, then to each page after it."""
    import signal
    import urllib.request

    opts = [f"-o{k}={v}" for k, v in options.items()]
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rayform.cli.main", "--store", store, *opts, "view", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    said = proc.stdout.readline()
    url = said[said.index("http://"):].split()[0].rstrip("/")
    out: dict = {}

    def get(path: str) -> dict:
        with urllib.request.urlopen(url + path, timeout=600) as r:
            return json.loads(r.read())

    try:
        t = time.perf_counter()
        first = get("/api/segments?limit=50")
        out["first_line"] = time.perf_counter() - started  # the server's start included
        out["first_page"] = time.perf_counter() - t
        for name, path in (("sites", "/api/sites"), ("filtered", f"/api/segments?task=pick&where={QUERY_URL}"),
                           ("flagged", "/api/segments?flagged=1"),
                           ("sorted", "/api/segments?sort=duration&desc=1"),
                           ("next page", "/api/segments?sort=duration&desc=1&offset=50")):
            t = time.perf_counter()
            get(path)
            out[name] = time.perf_counter() - t
        row = first["rows"][0]
        t = time.perf_counter()
        get(f"/api/segment/{row['id']}?version={row['version']}")
        get(f"/api/segment/{row['id']}/series?version={row['version']}")
        out["episode"] = time.perf_counter() - t
        status = Path(f"/proc/{proc.pid}/status").read_text()
        out["rss_mib"] = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024
        out["total"] = first["total"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    out["seconds"] = time.perf_counter() - started
    return out


def run(n: int, s3: bool, pack: bool = True) -> dict:
    options: dict = {}
    moto = None
    tmp = tempfile.mkdtemp(prefix="rayform-catalog-")
    if s3:
        sys.path.insert(0, str(HERE))
        import boto3
        from streaming import start_moto

        moto, url = start_moto()
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="k",
                     aws_secret_access_key="s").create_bucket(Bucket="bench")
        options = {"endpoint_url": url, "key": "k", "secret": "s"}
        store = "s3://bench/store"
        os.environ["BENCH_CACHE"] = os.path.join(tmp, "cache")
    else:
        store = os.path.join(tmp, "store")
    try:
        rows = {}
        rows["add"] = _run_step("add", store, options, n)
        rows["create"] = _run_step("create", store, options, n)
        rows["query"] = _run_step("query", store, options, n)
        rows["ls"] = _cli_step(["segments", "ls", "--site", "lab"], store, options)
        rows["ls --limit 10"] = _cli_step(["segments", "ls", "--site", "lab", "--limit", "10"], store, options)
        rows["show"] = _cli_step(["show", "all"], store, options)
        rows["doctor"] = _cli_step(["doctor", "--site", "lab"], store, options, ok=(0, 1))  # exit 1: some flagged
        rows["view"] = _view_step(store, options)
        if pack:
            rows["pack"] = _run_step("pack", store, options, n)
            _run_step("long", store, options, n)
            rows["pack-long"] = _run_step("pack-long", store, options, n)
        return rows
    finally:
        if moto is not None:
            moto.kill()


def report(n: int, rows: dict) -> None:
    print(f"\n{n:,} episodes")
    print(f"{'step':16} {'seconds':>9} {'ms/episode':>11} {'objects':>9} {'requests':>9} {'req/episode':>12} "
          f"{'peak RSS MiB':>13}")
    for name, r in rows.items():
        objects = r.get("objects", "")
        req = r.get("requests", "")
        print(f"{name:16} {r['seconds']:9.2f} {1000 * r['seconds'] / n:11.4f} {objects!s:>9} {req!s:>9} "
              f"{(req / n if req != '' else 0):12.4f} {r['rss_mib']:13.0f}"
              + (f"   first line {r['first_line']:.2f} s" if r.get("first_line") is not None else ""))
    view = rows.get("view")
    if view:
        print(f"view: first page {view['first_page']:.2f} s ({view['first_line']:.2f} s from the server's start, "
              f"{view['total']:,} segments); then sites {view['sites']:.2f} s, filtered {view['filtered']:.2f} s, "
              f"flagged only {view['flagged']:.2f} s, "
              f"sorted {view['sorted']:.2f} s, its next page {view['next page']:.3f} s, an episode {view['episode']:.2f} s; "
              f"peak RSS {view['rss_mib']:.0f} MiB")
    if "pack" not in rows:
        return
    beyond = (rows["pack"]["seconds"] - rows["pack-long"]["seconds"]) / n
    print(f"pack beyond its samples: {1000 * beyond:.3f} ms an episode "
          f"({rows['pack']['seconds']:.1f} s against {rows['pack-long']['seconds']:.1f} s for the same samples "
          f"in {max(1, n // 1000)} episodes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int)
    ap.add_argument("--s3", action="store_true", help="a store on moto's S3 server on loopback")
    ap.add_argument("--slope", action="store_true", help="also run 10x fewer episodes")
    ap.add_argument("--no-pack", action="store_true", help="the metadata steps only")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        print(json.dumps(step(args.step, args.store, json.loads(args.options), args.episodes)))
        return
    n = args.episodes or (100_000 if args.s3 else 1_000_000)
    sizes = [n // 10, n] if args.slope else [n]
    for size in sizes:
        report(size, run(size, args.s3, pack=not args.no_pack))


if __name__ == "__main__":
    main()
