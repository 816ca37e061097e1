"""A Ctrl-C held over a commit: answered after it, however the signal reaches the process."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rayform.interrupts import held


def _ctrl_c_from_another_thread() -> None:
    """SIGINT sent to the process while another thread runs: with the main thread blocking it,
    the kernel hands it to that thread (as it does to tqdm's monitor or a pool's feeder)."""
    def send() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # alive while the signal is delivered, so that it can take it

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()


def test_a_ctrl_c_that_another_thread_takes_waits_for_the_held_block():
    steps = []
    with pytest.raises(KeyboardInterrupt), held():
        _ctrl_c_from_another_thread()
        for step in range(200):  # Python runs a tripped handler at the next call or jump
            time.sleep(0.001)
            steps.append(step)
    assert len(steps) == 200, f"the Ctrl-C stopped the held block at step {len(steps)}"


def test_a_ctrl_c_in_this_thread_waits_too_and_none_is_invented():
    with pytest.raises(KeyboardInterrupt), held():
        signal.raise_signal(signal.SIGINT)
        done = True
    assert done
    with held():  # nothing came: nothing is answered
        pass


def test_the_handler_before_is_back_after_the_block():
    before = signal.getsignal(signal.SIGINT)
    with held():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
