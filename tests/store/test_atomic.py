"""Scratch directories that many processes share: each sweeps what dead processes left,
never what a live one is using, and never trips over a directory its owner just removed."""

from __future__ import annotations

import os

from rayform.store.atomic import host_name, scratch_dir, sweep_scratch


def _dead_pid() -> int:
    pid = 4_000_000  # above any pid_max Linux allows by default
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


def test_a_dead_processes_scratch_is_swept_a_live_ones_is_kept(tmp_path):
    mine = scratch_dir(tmp_path)
    dead = tmp_path / f".tmp-{host_name()}-{_dead_pid()}-abcd1234"
    (dead / "part").mkdir(parents=True)
    other = tmp_path / "not-ours"
    other.mkdir()

    assert sweep_scratch(tmp_path) == 1
    assert not dead.exists()
    assert os.path.isdir(mine) and other.is_dir()


def test_a_directory_removed_between_listing_and_look_is_skipped(tmp_path, monkeypatch):
    dead = tmp_path / f".tmp-{host_name()}-{_dead_pid()}-abcd1234"
    gone = tmp_path / f".tmp-{host_name()}-{_dead_pid()}-efgh5678"
    dead.mkdir()
    gone.mkdir()
    listed = list(os.scandir(tmp_path))
    gone.rmdir()  # its owner finished after the listing: the sweep must go on with the rest
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: iter(listed) if path == str(tmp_path) else scandir(path))

    assert sweep_scratch(tmp_path) == 1
    assert not dead.exists()
