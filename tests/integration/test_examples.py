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
def test_streaming_example_streams_from_s3(s3_demo, tmp_path):
    url, options, slice_id = s3_demo
    env = {**os.environ, "RAYFORM_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "streaming.py"), "--store", url, "--slice", slice_id,
                        "--endpoint-url", options["endpoint_url"], "--epochs", "2"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = re.findall(r"epoch (\d): (\d+) samples \((\d+) per rank\)", r.stdout)
    assert [c[0] for c in counts] == ["0", "1"] and all(c[1] == c[2] for c in counts)
