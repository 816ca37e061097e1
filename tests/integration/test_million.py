"""A slice of a million samples: made, packed and opened within the test's budget, and read by both
datasets with their workers' memory where a small slice's is (asserted on RSS, never on time)."""

from __future__ import annotations

import numpy as np
import pytest

import rayform
from rayform import ArrayStream, ImageStream
from rayform.codec import imagecodec

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

FPS = 15
LARGE, SMALL = 1_000_000, 12_000
PER_SEGMENT = 20_000  # long segments: a million samples from 50 of them (making them costs seconds)
BUDGET_MIB = 50  # the bar: a worker's RSS within 50 MB of the small slice's


def _slice(client: rayform.Client, samples: int, name: str) -> rayform.Slice:
    """Segments of one 16×16 JPEG camera (frames cycled from a pool) and two joints."""
    rng = np.random.default_rng(samples)
    pool = [imagecodec.encode_jpeg(rng.integers(0, 255, (16, 16, 3), np.uint8), 90) for _ in range(16)]
    refs = []
    for i, start in enumerate(range(0, samples, PER_SEGMENT)):
        n = min(PER_SEGMENT, samples - start) + 1  # the last instant has no next one for its future
        ts = np.arange(n, dtype=np.int64) * (1_000_000_000 // FPS)
        joints = np.cumsum(rng.normal(0, 0.01, (n, 2)), axis=0).astype(np.float32)
        refs.append(client.segments.add("scale", f"{name}-{i:03d}", [
            ImageStream("cam/rgb", ts, [pool[k % 16] for k in range(n)]),
            ArrayStream("joints", ts, joints),
        ]))
    return client.slices.create(refs, name=name)


# Run in a process of its own per figure: a forked worker's RSS counts every page of its
# parent's heap (fork copies the page tables), and the test process's heap depends on the
# tests that ran before, not on the slice.
MEASURE = r"""
import json, sys
from pathlib import Path
import rayform
from torch.utils.data import DataLoader

store, slice_id, streaming, batches, fps = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), float(sys.argv[5])


def children():
    out = set()
    for task in Path("/proc/self/task").iterdir():
        try:  # a thread (pin-memory, a queue's feeder) may end between the listing and the read
            out.update(int(p) for p in (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return out


def rss_mib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


slice_ = rayform.Client(store).slices.get(slice_id)
kw = dict(obs=["cam/rgb", "joints"], action="joints", fps=fps, horizon=2)
if streaming:
    ds = rayform.torch.StreamingEpisodeDataset(slice_, **kw, batch_size=64)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
else:
    ds = rayform.torch.EpisodeDataset(slice_, **kw)
    loader = DataLoader(ds, batch_size=64, num_workers=2, shuffle=True)
peak, seen = 0.0, 0
for n, batch in enumerate(loader):
    assert batch["cam/rgb"].shape[1:] == (3, 16, 16) and batch["action"].shape[1:] == (2, 2)
    seen += len(batch["cam/rgb"])
    if n % 10 == 0:
        peak = max([peak] + [rss_mib(p) for p in children()])
    if n >= batches:
        break
print(json.dumps({"peak": peak, "seen": seen, "len": len(ds)}))
"""


def _largest_worker(slice_: rayform.Slice, streaming: bool, batches: int = 120) -> tuple[float, int]:
    """The largest DataLoader worker's RSS over ``batches`` batches of 64, and the samples seen,
    measured in a new process."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", MEASURE, str(slice_.store.root), slice_.id, "1" if streaming else "0",
                          str(batches), str(FPS)], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["len"] >= (LARGE if got["len"] > SMALL * 2 else SMALL) - 64
    return got["peak"], got["seen"]


@pytest.fixture(scope="module")
def slices(tmp_path_factory) -> tuple[rayform.Slice, rayform.Slice]:
    client = rayform.Client(tmp_path_factory.mktemp("million") / "store")
    small, large = _slice(client, SMALL, "small"), _slice(client, LARGE, "large")
    for s in (small, large):
        pack = client.pack(s, FPS, max_horizon=2, workers=2, progress=False)
        assert pack.samples >= len(s.segments) * 0 + (LARGE if s is large else SMALL)
    return small, large


@pytest.mark.parametrize("streaming", [False, True], ids=["EpisodeDataset", "StreamingEpisodeDataset"])
def test_a_million_samples_open_with_a_small_slice_s_memory(slices, streaming):
    small, large = slices
    small_peak, small_seen = _largest_worker(small, streaming)
    large_peak, large_seen = _largest_worker(large, streaming)
    print(f"{'streaming' if streaming else 'episode'}: worker RSS {small_peak:.0f} MiB at {SMALL}, "
          f"{large_peak:.0f} MiB at {LARGE}")
    assert small_seen == large_seen > 0
    assert small_peak > 0 and large_peak - small_peak < BUDGET_MIB, (
        f"worker RSS {large_peak:.0f} MiB at {LARGE} samples against {small_peak:.0f} MiB at {SMALL}")
