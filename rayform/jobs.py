"""Jobs on an executor: the caller's (any ``concurrent.futures.Executor``: a Dask or Ray
cluster's), a process pool of our own, or this process. Results come in job order; the
first failure cancels the jobs not yet started.

Our own pool is made to stop, whatever stops the work (a failed job, Ctrl-C):

- its workers ignore SIGINT: a terminal's Ctrl-C reaches the whole process group, and the
  parent alone decides what happens (otherwise every worker prints its own traceback);
- a worker ends itself once the parent is gone (``exit_with``), so a killed parent leaves
  no pool behind;
- on SIGTERM a worker unwinds the job it runs (its ``finally`` blocks drop what they were
  writing) and reports it stopped; when the work stops early, the parent sends that to every
  worker, ends the pool, waits up to ``STOP_S`` seconds, kills what is left and only then
  returns. So nothing of the pool is running, or half-written, once the caller sees the error
  (or ``KeyboardInterrupt``), and every result a worker sent is on its future.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

from rayform.interrupts import check_interrupt, held

J = TypeVar("J")
R = TypeVar("R")
STOP_S = 5.0  # how long stopped workers get to unwind before they are killed
POLL_S = 0.25  # how often a wait for a job's result looks for a Ctrl-C Python swallowed
_EXIT_STOPPED = 143  # a job stopped by SIGTERM (128 + 15), as a shell reports it
_SOCKET_PATH_BYTES = 107  # a Unix socket's path, its NUL left out (Linux's sun_path)


@dataclass(frozen=True)
class Run:
    """How a job's tasks run: on the caller's ``executor`` (else a pool of ``workers`` processes,
    default one a core), with a progress bar unless ``progress`` is off."""

    executor: Executor | None = None
    workers: int | None = None
    progress: bool = True


class JobRunner:
    """``with JobRunner(executor, workers) as jobs: results = jobs.each(fn, job_list)``.

    ``executor``: the caller's (used as given, never shut down here); else a pool of
    ``workers`` processes of our own when ``workers > 1``; else jobs run in this process.
    Jobs and their results must pickle (they cross to other processes), and ``fn`` must be a
    module-level function."""

    def __init__(self, executor: Executor | None, workers: int):
        self.given, self.workers = executor, workers
        self.pool: Executor | None = executor
        self._futures: list[Future[Any]] = []

    def __enter__(self) -> JobRunner:
        if self.pool is None and self.workers > 1:
            self.pool = ProcessPoolExecutor(self.workers, mp_context=pool_context(),
                                            initializer=functools.partial(_worker_setup, os.getpid()))
        return self

    def each(self, fn: Callable[[J], R], jobs: list[J]) -> Iterator[R]:
        """The results of ``fn`` on each job, in job order; on a pool, every job is submitted
        before this returns."""
        if self.pool is None:
            return (fn(job) for job in jobs if not check_interrupt())
        if self.given is None:
            # the first submit starts the pool's workers: a Ctrl-C landing between a worker's start
            # and its pool recording it would leave a worker no stop reaches (and the interpreter's
            # exit waiting on it for ever), so it is held until they are the pool's; the workers,
            # forked meanwhile, are born holding it too, until they ignore it (``_worker_setup``)
            with held():
                futures = [self.pool.submit(_run_job, fn, job) for job in jobs]
        else:
            futures = [self.pool.submit(fn, job) for job in jobs]
        self._futures += futures
        return self._results(futures)

    def finished(self) -> list[Any]:
        """The results of the jobs that have finished well so far, in job order (after a failure,
        what the jobs still did: their outputs are the caller's to take back)."""
        return [f.result() for f in self._futures if f.done() and not f.cancelled() and f.exception() is None]

    def failed(self) -> list[BaseException]:
        """What the jobs that failed or were stopped raised, in job order (a stopped job's
        ``JobStopped`` carries the attributes the job gave what stopped it)."""
        return [e for f in self._futures if f.done() and not f.cancelled() and (e := f.exception()) is not None]

    @staticmethod
    def _results(futures: list[Future[R]]) -> Iterator[R]:
        try:
            for f in futures:
                yield _result(f)
        finally:
            for f in futures:
                f.cancel()

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        pool, self.pool = self.pool, self.given
        if pool is None or self.given is not None:
            return
        if kind is None and all(f.done() for f in self._futures):
            pool.shutdown(wait=True)
            return
        assert isinstance(pool, ProcessPoolExecutor)
        stop_pool(pool)


def _result(future: Future[R]) -> R:
    """A job's result, waited for in steps: a Ctrl-C whose KeyboardInterrupt Python swallowed
    (raised inside a weakref callback of an import's lock, say, where exceptions are only
    printed) still stops the work within ``POLL_S``."""
    while True:
        try:
            result = future.result(timeout=POLL_S)
        except FutureTimeout:
            check_interrupt()
            continue
        check_interrupt()
        return result


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """End a pool of ours now: jobs not started are cancelled, running ones unwind (SIGTERM),
    and whatever has not exited after ``STOP_S`` is killed. Returns once every worker is gone.
    A second Ctrl-C meanwhile is ignored: this takes seconds, and it is what stops the work."""
    previous = _ignore_sigint()
    try:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            _signal(p, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in processes:
            if p.is_alive():
                _signal(p, signal.SIGKILL)
                p.join(1.0)
        # the results the workers sent before they went are on their futures once this ends
        manager = getattr(pool, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(STOP_S)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _ignore_sigint() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, signal.SIG_IGN)


def _signal(process: multiprocessing.process.BaseProcess, sig: int) -> None:
    if process.pid is None:
        return
    try:
        os.kill(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def pool_context() -> multiprocessing.context.BaseContext:
    """How our pool starts its workers. Fork does not re-import the caller's script (spawn and
    forkserver run an unguarded one again in every worker, and cannot at all from a script
    read on stdin), but it is unsafe once the parent has threads (s3fs's event loop, say):
    then forkserver. tqdm's monitor thread does not count: any tqdm bar starts it, even a
    disabled one, it only sleeps and refreshes bars, and the jobs use no bar."""
    if sys.platform.startswith("linux"):
        others = [t for t in threading.enumerate()
                  if t is not threading.main_thread() and type(t).__name__ != "TMonitor"]
        if not others:
            return multiprocessing.get_context("fork")
        if _socket_fits():
            return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def _socket_fits() -> bool:
    """Whether forkserver's socket fits its temporary folder: it is made at
    ``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`` and a Unix socket's path holds 107 bytes, so a
    long TMPDIR (a CI runner's, a test's) fails the pool with "AF_UNIX path too long". Spawn
    needs no socket and re-imports the caller's script as forkserver does: it starts slower."""
    return len(os.fsencode(tempfile.gettempdir())) + len("/pymp-XXXXXXXX/listener-XXXXXXXX") <= _SOCKET_PATH_BYTES


def exit_with(pid: int, interval_s: float = 0.5) -> None:
    """In a pool worker: end this process soon after process ``pid`` (the one that started
    the pool) is gone, so a killed parent never leaves its workers running."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if not alive(pid) or (parent == pid and os.getppid() != pid):
                os._exit(1)

    threading.Thread(target=watch, name="rayform-parent-watch", daemon=True).start()


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


class Stopped(SystemExit):
    """Raised in a worker's job by SIGTERM: the job unwinds (its ``finally`` blocks run)."""


class JobStopped(RuntimeError):
    """What a stopped job reports to the parent in place of its result. The worker stays up
    (it takes no other job) until the stopped pool ends it: a worker that died would break the
    pool, and the results other workers were sending at that moment would be lost with it."""


_in_job = False
_stopping = False  # SIGTERM came: this worker runs no job any more


def _worker_setup(parent: int) -> None:
    """A pool worker: the parent alone answers Ctrl-C; SIGTERM stops the job it runs; it ends
    with its parent. Between jobs SIGTERM waits (blocked): the worker is then idle, or sending
    its last result, which a stop must not cut in half."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # held by the parent as it forked this (``interrupts.held``)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.unraisablehook = functools.partial(_unraisable, sys.unraisablehook)
    _mask(signal.SIG_BLOCK)
    exit_with(parent)


def _unraisable(default: Callable[[Any], object], hook_args: Any) -> None:
    """A stop that landed where Python cannot raise (a weakref callback, a ``__del__``) is
    dropped there without a word: the job runs on to its end, as one that ``finishing`` had
    made unstoppable, and the parent, stopping, takes its result back as any finished job's.
    Python would print it as an ignored exception, a traceback beside the command's one line."""
    if isinstance(getattr(hook_args, "exc_value", None), Stopped):
        return
    default(hook_args)


def _mask(how: int) -> None:
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(how, {signal.SIGTERM})


def _on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    global _stopping
    first, _stopping = not _stopping, True
    if first and _in_job:
        raise Stopped(_EXIT_STOPPED)


def finishing() -> None:
    """In a job: from here it runs to its end, a stop waits (call it once the job has what it
    returns, where a stop could no longer take its effects back). Nothing outside our pool."""
    if _in_job:
        _mask(signal.SIG_BLOCK)


def _run_job(fn: Callable[[J], R], job: J) -> R:
    """A job in a worker of ours; once stopped, it unwinds and reports ``JobStopped``."""
    global _in_job
    _in_job = True
    try:
        _mask(signal.SIG_UNBLOCK)  # a stop sent while it waited for this job is taken here, at once
        if _stopping:
            raise Stopped(_EXIT_STOPPED)
        return fn(job)
    except Stopped as e:
        stopped = JobStopped("stopped")
        stopped.__dict__.update(vars(e))  # what the job attached on its way out (e.g. what to take back)
        raise stopped from None
    finally:
        _mask(signal.SIG_BLOCK)
        _in_job = False
