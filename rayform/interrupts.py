"""Ctrl-C in the ``rayform`` command: one line and exit 130, from its first instant.

Two stages. While the command is being imported (``rayform/__init__`` calls
``guard_the_command`` first thing, in the ``rayform`` process only), nothing has started
that could need stopping: a Ctrl-C writes the one line and ends the process at once, so no
traceback of an import ever shows. From ``cli.main.main`` on, ``on_ctrl_c`` raises
KeyboardInterrupt, which unwinds what runs (a pool of ours is stopped, scratch removed), and
remembers it: Python swallows a KeyboardInterrupt raised inside a weakref callback (an
import's lock, say) and only prints it, so a wait for a job's result raises it again
(``check_interrupt``) until the command has answered it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

TYPE_CHECKING = False  # not typing's: importing typing takes 15 ms, while a Ctrl-C would show a traceback
if TYPE_CHECKING:
    from types import FrameType

_interrupted = False  # a Ctrl-C came and the command has not yet answered it


def _stop_at_once(_signum: int, _frame: FrameType | None) -> None:
    os.write(2, b"rayform: interrupted\n")
    os._exit(130)


def is_the_command(argv: list[str], orig_argv: list[str]) -> bool:
    """Whether this process is the ``rayform`` command (its console script, or ``python -m
    rayform.cli.main``), not a program that imports rayform."""
    return bool(argv) and os.path.basename(argv[0]) == "rayform" or orig_argv[1:3] == ["-m", "rayform.cli.main"]


def guard_the_command() -> None:
    """In the ``rayform`` command only: until ``main`` takes over, a Ctrl-C ends the process
    with the one line and 130 (an import has nothing to unwind)."""
    if is_the_command(sys.argv, list(getattr(sys, "orig_argv", []))):
        # the C module: signal.py would import enum first (by __import__: whether typeshed has
        # stubs for it varies with mypy's release, and no ignore is then unused in one of them)
        c_signal = __import__("_signal")
        c_signal.signal(c_signal.SIGINT, _stop_at_once)


def on_ctrl_c(_signum: int, _frame: FrameType | None) -> None:
    """The command's SIGINT handler once it runs: raise KeyboardInterrupt, and remember it."""
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def check_interrupt() -> bool:
    """Raise KeyboardInterrupt if a Ctrl-C came that nothing has answered yet; else False."""
    if _interrupted:
        raise KeyboardInterrupt
    return False


def answered_interrupt() -> None:
    """The command has answered the Ctrl-C (it is stopping): ``check_interrupt`` raises no more."""
    global _interrupted
    _interrupted = False


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A Ctrl-C during this is held until it ends, then answered as usual: what it protects (the
    few writes that make a change visible, e.g. an ingest's catalog part and slice) happens
    whole. Outside the main thread a plain block.

    Blocking SIGINT in this thread is not enough: the kernel then hands it to another thread of
    the process (tqdm's monitor, a pool's feeder), whose C handler still has the main thread run
    the Python one, inside the block. So the Python handler is swapped for one that notes the
    Ctrl-C, and the block's end sends it again to the handler it replaced. The mask stays for
    what this thread forks meanwhile: a child is born with SIGINT blocked (``jobs``)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    masked = hasattr(signal, "pthread_sigmask")
    if masked:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    # a handler set from C (an embedding program's) cannot be put back from Python: left as it is
    previous = signal.getsignal(signal.SIGINT)
    if previous is not None:
        signal.signal(signal.SIGINT, lambda signum, _frame: came.append(signum))
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if masked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one pending reaches ``previous`` now
        if came:
            signal.raise_signal(signal.SIGINT)
