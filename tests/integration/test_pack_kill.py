"""kill -9 of a pack: no process of its group lives on, and a rerun sweeps what it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rayform.store.atomic import temp_prefix

pytestmark = pytest.mark.slow


def _group(pgid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getpgid(int(d)) == pgid:
                    out.append(int(d))
            except (ProcessLookupError, PermissionError):
                pass
    return out


def _rayform(*args: str, env: dict) -> list[str]:
    return [sys.executable, "-m", "rayform.cli.main", "-q", *args]


def test_a_killed_pack_leaves_no_process_and_a_rerun_sweeps_its_temporaries(tmp_path):
    env = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache"),
           "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    made = subprocess.run(_rayform("demo", "--episodes", "4", "--seconds", "6", env=env), env=env,
                          capture_output=True, text=True, timeout=300)
    slice_id = made.stdout.split()[-1]
    pack = _rayform("pack", slice_id, "--fps", "30", "--codec", "jpeg", "--resize", "160x160", "--workers", "2",
                    env=env)
    proc = subprocess.Popen(pack, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while len(_group(proc.pid)) < 3 and time.time() < deadline:  # the driver and its two workers
        time.sleep(0.05)
    assert len(_group(proc.pid)) >= 3, "the pack's pool never started"
    # a temporary as a killed writer leaves it: named for this host and the driver's pid
    blobs = tmp_path / "store" / "blobs" / "00"
    blobs.mkdir(parents=True, exist_ok=True)
    left = blobs / (temp_prefix().replace(f"-{os.getpid()}-", f"-{proc.pid}-") + "abcd1234")
    left.write_bytes(b"half a shard")
    foreign = blobs / ".tmp-otherhost-1-abcd1234"  # another machine's, recent: not ours to judge
    foreign.write_bytes(b"x")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.time() + 15
    while _group(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _group(proc.pid) == [], "processes of the killed pack live on"
    assert proc.stdout.read() is not None  # EOF: nothing holds the caller's pipe open

    rerun = subprocess.run(pack, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert not left.exists() and foreign.exists()
    assert not [p for p in (tmp_path / "tmp" / "rayform-pack").iterdir()]
