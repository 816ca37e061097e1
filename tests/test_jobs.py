"""Our own pool stops, whatever stops the work, wherever a Ctrl-C lands."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from rayform import jobs


def _square(x: int) -> int:
    return x * x


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_ctrl_c_while_the_pool_starts_its_workers_leaves_no_worker_behind(monkeypatch):
    """The first submit forks the workers; a Ctrl-C landing right after a fork, before the
    pool has recorded that worker, must still reach it (else the exit waits on it for ever)."""
    context = jobs.pool_context()
    start = context.Process.start
    sent = []

    def start_then_ctrl_c(self):
        start(self)
        if not sent:
            sent.append(self)
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(context.Process, "start", start_then_ctrl_c)
    before = set(multiprocessing.active_children())
    try:
        with pytest.raises(KeyboardInterrupt), jobs.JobRunner(None, 2) as runner:
            list(runner.each(_square, list(range(8))))
        assert sent, "no worker was started"
        # the OS's word, not is_alive(): the pool's manager thread may have reaped a worker that
        # stop_pool joined, and is_alive() then reports it running for ever
        left = [p.pid for p in set(multiprocessing.active_children()) - before if _running(p.pid)]
        assert left == [], f"workers left running: {left}"
    finally:
        for p in set(multiprocessing.active_children()) - before:
            if _running(p.pid):
                os.kill(p.pid, signal.SIGKILL)
            p.join(5)


def test_jobs_run_on_our_pool_in_job_order():
    with jobs.JobRunner(None, 2) as runner:
        assert list(runner.each(_square, list(range(10)))) == [x * x for x in range(10)]


def test_a_stop_python_cannot_raise_is_dropped_without_a_traceback():
    """A SIGTERM landing in a weakref callback: Python hands the Stopped to the unraisable hook,
    which a worker of ours answers without printing (the command's stderr keeps its one line);
    anything else still reaches Python's own hook."""
    import types

    from rayform.jobs import Stopped, _unraisable

    seen = []
    _unraisable(seen.append, types.SimpleNamespace(exc_value=Stopped(143)))
    assert seen == []
    other = types.SimpleNamespace(exc_value=ValueError("x"))
    _unraisable(seen.append, other)
    assert seen == [other]


def test_a_pool_started_beside_threads_under_a_long_tmpdir_runs_its_jobs(tmp_path):
    """forkserver (a pool started while the process has threads) makes its socket under
    TMPDIR, and a Unix socket's path holds 107 bytes: under a long TMPDIR the pool starts its
    workers another way rather than fail with 'AF_UNIX path too long'."""
    import subprocess
    import sys

    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    code = ("import threading, time\nfrom rayform import jobs\n"
            "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "print(jobs.pool_context().get_start_method())\n"
            "with jobs.JobRunner(None, 2) as runner:\n"
            "    print(sorted(runner.each(abs, [-3, -1, 2])))\n")
    env = {**os.environ, "TMPDIR": str(deep)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["spawn", "[1, 2, 3]"]
    short = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(tmp_path.parent.parent)},
                           capture_output=True, text=True, timeout=120)
    assert short.stdout.split("\n")[:2] == ["forkserver", "[1, 2, 3]"], short.stderr[-2000:]
