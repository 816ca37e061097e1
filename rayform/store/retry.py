"""Trying a read of a store again: throttling slows a run, it never ends it.

A busy object store answers a large training job with 503 Slow Down (or 429, 500, 502, 504),
drops connections and stalls. None of that is the data's fault, so a read that meets one
waits and goes on where it stopped, for as long as it makes progress: a time budget, not a
count of tries, which a busy endpoint would exhaust in seconds. The budget runs from the last
byte that arrived (progress starts it again), and the waits between tries grow exponentially
with full jitter, so the readers sharing a throttled endpoint spread out instead of retrying
in step. What is not transient (a missing object, refused credentials, a bad request, a
corrupt byte) is said at once.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from rayform.errors import InvalidInput, RayformError

# HTTP statuses of a server that is busy or briefly broken: worth waiting for
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class HttpStatus(OSError):
    """An HTTP answer other than the data (the URL, which may carry a signature, stays out)."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"HTTP {status} {reason}")
        self.status = status


def transient(error: BaseException) -> bool:
    """Whether ``error`` may pass if the read is tried again later."""
    if isinstance(error, RayformError | FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if isinstance(error, HttpStatus):
        return error.status in TRANSIENT_STATUS
    return isinstance(error, OSError | TimeoutError | ConnectionError | EOFError)


@dataclass(frozen=True)
class Retry:
    """How a read that failed or stalled is tried again: after a transient failure it waits
    ``backoff_s`` (doubling up to ``max_backoff_s``, with full jitter) and goes on at the byte
    where it stopped, until ``budget_s`` seconds pass with no byte arriving; a request that
    sends nothing for ``timeout_s`` seconds counts as failed (on the streaming GET path; stores
    read through fsspec's own file objects use that filesystem's timeouts)."""

    budget_s: float = 300.0
    backoff_s: float = 0.2
    max_backoff_s: float = 10.0
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("budget_s", "backoff_s", "max_backoff_s", "timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e7:
                raise InvalidInput(f"Retry {name} {value!r}: must be a number of seconds in [0, 1e7)")
        if self.timeout_s <= 0:
            raise InvalidInput(f"Retry timeout_s {self.timeout_s!r}: must be > 0")

    def delay(self, attempt: int) -> float:
        """The longest wait before try ``attempt + 1`` (the wait itself is drawn below it)."""
        return float(min(self.max_backoff_s, self.backoff_s * (2 ** min(attempt, 60))))

    def attempts(self, stop: threading.Event | None = None) -> Attempts:
        """The state of one read under this policy."""
        return Attempts(self, stop)


class Attempts:
    """One read's tries: ``progress()`` when bytes arrive; ``wait(error)`` after a failure,
    which sleeps, or raises once the budget since the last progress is spent."""

    def __init__(self, retry: Retry, stop: threading.Event | None = None):
        self.retry = retry
        self._stop = stop or threading.Event()
        self._since = time.monotonic()
        self.failed = 0  # failures since the last progress
        self.waited = 0.0  # seconds spent waiting since the last progress

    def progress(self) -> None:
        self._since, self.failed, self.waited = time.monotonic(), 0, 0.0

    def wait(self, error: BaseException) -> bool:
        """After ``error``: False where it is not worth another try (not transient, or the
        budget is spent: the caller raises, saying ``spent()``); else sleep and True (False if
        stopped meanwhile)."""
        if not transient(error):
            return False
        pause = random.uniform(0, self.retry.delay(self.failed))  # full jitter
        if time.monotonic() - self._since + pause > self.retry.budget_s:
            return False
        self.failed += 1
        self.waited += pause
        return not self._stop.wait(pause)

    def spent(self) -> str:
        """How long it tried, for the message of a read that gave up."""
        return (f"{self.failed + 1} tries over {time.monotonic() - self._since:.1f} s with no byte arriving "
                f"(the budget: Retry(budget_s={self.retry.budget_s:g}))")

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()
