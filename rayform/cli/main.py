"""The ``rayform`` command.

Every failure is one line on stderr, ``rayform: error: <what failed>. <how to fix it>``:
exit 2 for user and data errors (every RayformError: a bad argument, a missing slice, a
corrupt or hostile store, offline), 1 for anything else (a bug, the machine), and 1 from
``verify`` when it finds bad blobs. A traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from rayform import interrupts
from rayform.cli.parser import EXIT_USER, parser
from rayform.cli.profiles import apply as apply_profile
from rayform.cli.terminal import SafeText, safe
from rayform.errors import OfflineError, RayformError

EXIT_CORRUPT = 1  # bad blobs found by verify, and any failure that is not a RayformError


GLOBAL_DEFAULTS: dict[str, Any] = {"store": None, "option": [], "cache": None, "profile": None, "quiet": False,
                                   "debug": False}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, the global options wherever they were given."""
    args = parser().parse_args(argv)
    # not parser.set_defaults: it would set the default of the option object the (sub)command
    # parsers share, and a value given before the command would be reset after it
    for key, value in GLOBAL_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, value)
    return args


def command() -> NoReturn:
    """The ``rayform`` command: ``main`` on the process's arguments, then exit with its code."""
    code = main()
    # done: a Ctrl-C while the interpreter exits changes nothing (it would end it by SIGINT, -2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code``, as Python's own exit does up to its native teardown,
    which is skipped: there a library's C++ thread pool (Arrow's) still running aborts the
    process ("terminate called without an active exception", exit 134) after the command's
    work and output were done, 1 run in 10-40 of the catalog commands. Threads are joined,
    atexit functions run (pools, temporary files, logging), the streams flushed, then out."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (`| head`) or a closed stream: nothing to say
            pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C raises KeyboardInterrupt from here on, remembered so that one Python swallows stops
    # the work all the same; before, the guard ``rayform/__init__`` set answered it alone (``interrupts``)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, interrupts.on_ctrl_c) if main_thread else None
    stdout = sys.stdout
    sys.stdout = SafeText(stdout)  # a store's strings reach the terminal escaped
    try:
        return _run(argv)
    except BaseException as e:
        if not _from_ctrl_c(e):
            raise
        # One line, exit 130, whatever was running: a pool of ours is stopped on its way out
        # (``rayform.jobs``). A second Ctrl-C while this exits changes nothing.
        if main_thread:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupts.answered_interrupt()
        _close_bars()
        print("rayform: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout = stdout
        if previous is not None and signal.getsignal(signal.SIGINT) is interrupts.on_ctrl_c:
            signal.signal(signal.SIGINT, previous)


def _run(argv: Sequence[str] | None) -> int:
    args = parse(argv)
    # rayform's own messages at INFO; every library's (botocore, s3fs, …) only from WARNING
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("rayform").setLevel(logging.INFO)
    try:
        apply_profile(args)
        return int(args.run(args) or 0)
    except RayformError as e:
        if args.debug:
            raise
        _close_bars()
        fix = "" if not isinstance(e, OfflineError) or "Run:" in str(e) or "Unset" in str(e) else \
            ". Pull the slice it is of first: rayform pull SLICE, with RAYFORM_OFFLINE unset"
        print(f"rayform: error: {safe(str(e))}{fix}", file=sys.stderr)
        return EXIT_USER
    except BrokenPipeError:  # the reader went away (`rayform stats … | head`): nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception as e:
        if args.debug or _from_ctrl_c(e):
            raise
        _close_bars()
        text = safe(str(e).split("\n", 1)[0][:300])
        print(f"rayform: error: {type(e).__name__}: {text}. Run again with --debug for the traceback",
              file=sys.stderr)
        return EXIT_CORRUPT


def _from_ctrl_c(e: BaseException) -> bool:
    """A KeyboardInterrupt, or an error Python made of one: a Ctrl-C landing in a class's
    making becomes ``RuntimeError: Error calling __set_name__``, the interrupt its cause."""
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _close_bars() -> None:
    """Close the progress bars a failure left open (each clears its line), so the message
    that follows starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    if tqdm is not None:
        for bar in list(getattr(tqdm.tqdm, "_instances", ())):
            if not hasattr(bar, "pos"):  # Ctrl-C landed while the bar was being made: nothing drawn yet
                tqdm.tqdm._instances.discard(bar)
                continue
            bar.close()


if __name__ == "__main__":
    command()
