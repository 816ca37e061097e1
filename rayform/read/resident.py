"""How many bytes of mapped files this process holds resident (what a monitor counts of them)."""

from __future__ import annotations

import os

_status: tuple[int, int] | None = None  # (pid, a descriptor of its /proc/<pid>/status), or (pid, -1): none


def resident_file_bytes() -> int | None:
    """``RssFile`` of this process (Linux), None where the OS does not say. A ``pread`` of an
    open descriptor: a few µs."""
    global _status
    pid = os.getpid()
    if _status is None or _status[0] != pid:  # a forked child reads its own
        try:
            _status = (pid, os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            _status = (pid, -1)
    if _status[1] < 0:
        return None
    data = os.pread(_status[1], 8192, 0)
    at = data.find(b"RssFile:")
    if at < 0:
        return None
    return int(data[at + 8 : data.index(b"kB", at)]) * 1024
