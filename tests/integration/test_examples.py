"""The examples run as a new user runs them, on the embedded default store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_train_makes_the_demo_and_its_loss_goes_down(tmp_path):
    env = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "train.py"), "--steps", "60", "--batch-size", "32"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    log = r.stderr
    assert "making one" in log and "packing it now" in log
    m = re.search(r"done: loss ([\d.]+) -> ([\d.]+) over 60 steps", log)
    assert m, log[-2000:]
    assert float(m.group(2)) < float(m.group(1))
    assert re.search(r"step   50 .* \d+ samples/s", log)


@pytest.mark.s3
@pytest.mark.dist
@pytest.mark.slow
def test_streaming_example_under_torchrun_repeats_itself_and_resumes_exactly(s3_demo, s3_endpoint, tmp_path):
    """The issue's check as a user runs it: torchrun, 2 ranks x 2 workers, keys per rank;
    the same run again; a run stopped mid-epoch at 2 ranks and resumed from its checkpoint
    at 1 rank with 1 worker, continuing the same global sequence."""
    url, options, slice_id = s3_demo

    def run(name: str, *extra: str, ranks: int = 2, workers: int = 2) -> str:
        out = tmp_path / name
        out.mkdir(exist_ok=True)
        env = {**os.environ, "RAYFORM_CACHE_DIR": str(tmp_path / f"cache-{name}"), "OMP_NUM_THREADS": "1"}
        r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
                            str(ROOT / "examples" / "streaming.py"), "--store", url, "--slice", slice_id,
                            "--endpoint-url", options["endpoint_url"], "--global-batch", "8",
                            "--workers", str(workers), "--keys-out", str(out), *extra],
                            capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        return r.stdout

    def keys(name: str) -> dict[str, list[str]]:
        return {f.name: f.read_text().split("\n")[:-1] for f in sorted((tmp_path / name).glob("rank*.txt"))}

    def global_sequence(found: dict[str, list[str]], epoch: int) -> list[tuple[int, str]]:
        """Each step's global batch, ranks in rank order."""
        lines = [(int(line.split()[0]), r, line.split()[1]) for r in range(2)
                 for line in found.get(f"rank{r}.epoch{epoch}.txt", [])]
        return [(step, key) for step, _, key in sorted(lines, key=lambda x: (x[0], x[1]))]

    log = run("first")
    counts = re.findall(r"rank (\d) epoch (\d): (\d+) samples \((\d+) per rank\)", log)
    assert sorted((c[0], c[1]) for c in counts) == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert all(c[2] == c[3] for c in counts)
    first = keys("first")
    for epoch in (0, 1):
        ranks = [[x.split()[1] for x in first[f"rank{r}.epoch{epoch}.txt"]] for r in (0, 1)]
        every = set(ranks[0]) | set(ranks[1])
        # equal counts; a sample twice only where the last global batch is padded (fewer than 8)
        assert len(ranks[0]) == len(ranks[1]) and len(ranks[0]) + len(ranks[1]) - len(every) < 8
    assert {k for _, k in global_sequence(first, 0)} == {k for _, k in global_sequence(first, 1)}
    assert global_sequence(first, 0) != global_sequence(first, 1)  # a new order each epoch

    run("again")
    assert keys("again") == first

    ckpt = str(tmp_path / "resumed" / "ckpt.json")
    stopped = run("resumed", "--checkpoint", ckpt, "--stop-after", "14")
    assert "stopped after 14 batches, in epoch 1" in stopped
    s3_endpoint.reset_counts()
    resumed = run("resumed", "--checkpoint", ckpt, ranks=1, workers=1)
    assert "resuming epoch 1 at step" in resumed
    done = keys("resumed")
    for epoch in (0, 1):  # nothing repeated, nothing skipped: the 2-rank run's sequence, finished by 1 rank
        assert global_sequence(done, epoch) == global_sequence(first, epoch)
    # every shard came into the (shared) cache in the stopped run's first epoch: none is fetched again
    assert [path for method, path in s3_endpoint.requests if method == "GET" and "/blobs/" in path] == []


@pytest.mark.slow
def test_mixture_example_mixes_a_real_recording_with_the_demo(real_data, tmp_path):
    env = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "mixture.py"),
                        str(real_data / "lerobot_v30_so101_ros2_example"), "--weights", "0.8", "0.2"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = re.search(r"6 episodes\): (\d+) samples \((0\.\d+) of the epoch\); .*\(demo, 6 episodes\): (\d+) \((0\.\d+)\)",
                      r.stdout)
    assert found, r.stdout
    real, demo = int(found.group(1)), int(found.group(3))
    assert abs(real - 0.8 * (real + demo)) <= 1  # round(w·N), and at most one sample of padding


@pytest.mark.slow
def test_mixture_example_runs_without_a_recording(tmp_path):
    env = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "mixture.py"), "--weights", "0.7", "0.3"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    found = re.search(r"a second simulated site, 4 episodes\): (\d+) samples .*\(demo, 6 episodes\): (\d+)", r.stdout)
    assert found, r.stdout
    first, demo = int(found.group(1)), int(found.group(2))
    assert abs(first / (first + demo) - 0.7) < 0.01  # round(w·N), and the last batch's padding


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("example", ["train.py", "distributed.py"])
def test_an_example_against_an_unreachable_store_says_one_line(tmp_path, example):
    """No traceback, no botocore INFO logs: one line naming the store and what to check."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}", "RAYFORM_CACHE_DIR": str(tmp_path / "cache"),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_closed_port()), "RANK": "0", "WORLD_SIZE": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / example), "--store", "s3://bucket/rayform"],
                       capture_output=True, text=True, env=env, timeout=120)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith(f"{example}: error: s3://bucket/rayform: cannot read") and "endpoint" in lines[0]
