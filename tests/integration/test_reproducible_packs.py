"""A pack's bytes are a function of its inputs only: the same slice packed again and again by
two worker processes sharing one busy core, each time with another heap (glibc's malloc
filling fresh memory with another byte), gives one digest for every codec."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import add_video_slice

import rayform
from rayform.codec.codecs import VIDEO_CODECS
from rayform.codec.video_encoder import encoders

M_PERTURB = -6  # glibc's mallopt: fill what malloc hands out with this byte's complement


@contextlib.contextmanager
def one_busy_core() -> Iterator[None]:
    """This process (and the pack workers it forks) and a process spinning, all on one core."""
    if not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    core = min(before)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(spinner.pid, {core})  # not by preexec_fn: unsafe in a process with threads
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        spinner.kill()
        spinner.wait()


def perturb_heap(byte: int) -> bool:
    """Fresh memory from malloc holds ``~byte`` from now on (0: whatever it held); False where
    this is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(name) and hasattr(libc, "mallopt") and libc.mallopt(M_PERTURB, byte) == 1
    except OSError:
        return False


@pytest.mark.parametrize("codec", [*VIDEO_CODECS, "jpeg"])
def test_ten_packs_under_contention_have_one_digest(tmp_path, codec):
    if codec != "jpeg" and codec not in encoders():
        pytest.skip(f"this FFmpeg cannot encode {codec}")
    client = rayform.Client(tmp_path / "store")
    s = add_video_slice(client, episodes=2, frames=40, size=96)
    digests = []
    with one_busy_core():
        try:
            for run in range(10):
                perturb_heap(run % 4)
                pack = client.pack(s, 15, image_codec=codec, workers=2, progress=False, force=True)
                digests.append(pack.digest)
        finally:
            perturb_heap(0)
    assert len(set(digests)) == 1, digests
