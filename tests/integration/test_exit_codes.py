"""A command's exit code is its own: the catalog commands (Arrow's thread pools at work) end
with 0 every time, never by a native abort after their output (134)."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

RUNS = 25  # of each command; the abort came in 1 run of 10-40


def test_the_catalog_commands_exit_0_every_time(demo_client):
    client, _ = demo_client
    base = [sys.executable, "-m", "rayform.cli.main", "-q", "--store", str(client.store.url)]

    def run(i: int) -> subprocess.CompletedProcess:
        args = ["segments", "ls", "--json"] if i % 2 else ["slices", "create", "--where", "duration > 1",
                                                           "--name", f"again-{i}"]
        return subprocess.run([*base, *args], capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run, range(2 * RUNS)))
    assert [r.returncode for r in runs] == [0] * len(runs), [r.stderr for r in runs if r.returncode][:2]
    listed = [r for i, r in enumerate(runs) if i % 2]
    assert all(len(json.loads(r.stdout)) == 2 for r in listed)  # every line out before the end
