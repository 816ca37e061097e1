"""The CLI writes a store's strings to the terminal with every control character escaped."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import rayform
from rayform.cli.terminal import _CONTROL, safe

HOSTILE = "\x1b]0;PWNED\x07\x1b[2J"


@given(st.text())
def test_nothing_a_terminal_obeys_survives_and_the_rest_is_untouched(text):
    out = safe(text)
    assert not _CONTROL.search(out)
    if not _CONTROL.search(text):
        assert out == text
    assert out.count("\n") == text.count("\n") and out.count("\t") == text.count("\t")


def test_a_hostile_name_and_task_are_listed_escaped_and_json_stays_json(tmp_path):
    client = rayform.Client(tmp_path / "store")
    t = np.arange(10, dtype=np.int64) * 10**8
    client.segments.add("lab", HOSTILE, [rayform.ArrayStream("j", t, np.zeros((10, 2), np.float32))],
                        {"task": "pick\u202eevil\r\x85"})

    def cli(*args: str) -> str:
        run = subprocess.run([sys.executable, "-m", "rayform.cli.main", "--store", str(tmp_path / "store"), *args],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return run.stdout

    listed = cli("segments", "ls")
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in listed and not _CONTROL.search(listed)
    as_json = cli("segments", "ls", "--json")
    assert not _CONTROL.search(as_json)
    (row,) = json.loads(as_json)
    assert row["name"] == HOSTILE and row["task"] == "pick\u202eevil\r\x85"  # escaped, and the same strings
    err = subprocess.run([sys.executable, "-m", "rayform.cli.main", "--store", str(tmp_path / "store"),
                          "slices", "show", HOSTILE], capture_output=True, text=True, timeout=120).stderr
    assert "\\x1b[2J" in err and not _CONTROL.search(err.replace("\n", ""))
