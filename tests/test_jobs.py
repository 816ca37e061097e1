"""Our own pool stops, whatever stops the work, wherever a Ctrl-C lands."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from rayform import jobs


def _square(x: int) -> int:
    return x * x


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
        left = [p for p in set(multiprocessing.active_children()) - before if p.is_alive()]
        assert left == [], f"workers left running: {left}"
    finally:
        for p in set(multiprocessing.active_children()) - before:
            os.kill(p.pid, signal.SIGKILL)
            p.join(5)


def test_jobs_run_on_our_pool_in_job_order():
    with jobs.JobRunner(None, 2) as runner:
        assert list(runner.each(_square, list(range(10)))) == [x * x for x in range(10)]
