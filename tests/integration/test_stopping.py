"""Stopping a command: Ctrl-C, as a terminal sends it (SIGINT to the whole process group), at
several points of a pack and of an ingest: one line, exit 130 within seconds, no process of the
group left, nothing half-written anywhere, and an interrupted ingest leaves the store as it
found it; and kill -9 of a pack: no process of its group lives on, and a rerun sweeps what it
left."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

import rayform
from rayform.store.atomic import temp_prefix

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STOP_WITHIN_S = 10.0  # the pool's workers get 5 s to unwind before they are killed
PACKAGE = Path(rayform.__file__).resolve().parent


def _group(pgid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.getpgid(int(d)) == pgid:
                    out.append(int(d))
            except (ProcessLookupError, PermissionError):
                pass
    return out


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()} if root.exists() else {}


def _temporaries(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob(".tmp-*")]


def _command(*args: str, env: dict[str, str]) -> list[str]:
    return [sys.executable, "-m", "rayform.cli.main", "-q", *args]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rayform.cli.main", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def _interrupt(args: list[str], env: dict[str, str], after_s: float) -> tuple[int, str, float]:
    """Run the command in a session of its own, SIGINT its group after ``after_s``; (exit code,
    stderr, seconds from the signal to the exit). Every process of the group is gone after."""
    proc = subprocess.Popen([sys.executable, "-m", "rayform.cli.main", *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(after_s)
    sent = time.monotonic()
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:  # it had finished already
        pass
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    took = time.monotonic() - sent
    deadline = time.monotonic() + 5
    while _group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group(proc.pid) == [], f"processes of the interrupted command live on: {_group(proc.pid)}"
    return proc.returncode, err, took


def _check_stopped(code: int, err: str, took: float) -> bool | None:
    """True if the command was interrupted (not already done), checking how it said so; None
    if the Ctrl-C came while CPython itself was starting (``_in_pythons_start_up``)."""
    if code == 0:
        return False
    if _in_pythons_start_up(code, err):
        return None
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert code == 130, err[-2000:]
    assert lines and lines[-1] == "rayform: interrupted", err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert took < STOP_WITHIN_S, f"stopped {took:.1f} s after Ctrl-C"
    return True


def _in_pythons_start_up(code: int, err: str) -> bool:
    """The interrupt ended CPython before a line of rayform ran: in its site module, say, or a
    .pth file of the environment (certifi's, in CI), which a loaded machine makes slower than
    STARTUP_S. CPython ends as it always does there: by the signal itself, silent, before it
    set its handler; else exit 1 and a KeyboardInterrupt ("Fatal Python error:
    init_import_site"), no frame of the package in the traceback."""
    if code == -signal.SIGINT:
        return not err.strip()
    return code != 130 and "KeyboardInterrupt" in err and f'File "{PACKAGE}{os.sep}' not in err


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return {**os.environ, "RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache"),
            "TMPDIR": str(tmp_path / "tmp")}


def test_ctrl_c_stops_a_pack_at_any_point(tmp_path):
    env = _env(tmp_path)
    made = _run(["-q", "demo", "--episodes", "4", "--seconds", "8"], env)
    assert made.returncode == 0, made.stderr
    slice_id = made.stdout.split()[-1]
    pack = ["pack", slice_id, "--fps", "30", "--codec", "jpeg", "--resize", "96x96", "--workers", "2", "--force",
            "--shard-size", "1MiB"]
    for _ in range(2):  # the second run is timed: the first compiles and caches what a fresh venv lacks
        started = time.monotonic()
        assert _run(["-q", *pack], env).returncode == 0
        whole = time.monotonic() - started
    store, refs = tmp_path / "store", _files(tmp_path / "store" / "refs")

    def attempt(delay: float) -> bool | None:
        code, err, took = _interrupt(pack, env, delay)
        stopped = _check_stopped(code, err, took)
        assert _temporaries(store, tmp_path / "cache", tmp_path / "tmp") == []
        assert [p for p in (tmp_path / "tmp" / "rayform-pack").iterdir()] == []  # no scratch left
        assert _files(store / "refs") == refs  # --force of the same pack: its ref is the same
        for blob in (store / "blobs").rglob("*"):
            if blob.is_file():  # whatever a stopped pack stored is whole
                assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
        return stopped

    assert _stopped_at((0.15, 0.3, 0.45, 0.6, 0.75, 0.9), whole, attempt) >= 4, "the pack finished before most signals"


def _stopped_at(fractions: tuple[float, ...], whole: float, attempt: Callable[[float], bool | None]) -> int:
    """How many runs a signal at each fraction of ``whole`` (a timed run's seconds) stopped.
    A run that finishes before its signal was faster than the timed one (the tests share the
    machine's cores): the signals come earlier from then on, and the fraction is tried again
    (as it is, unchanged, after a signal that landed in CPython's own start-up)."""
    stopped, todo = 0, list(fractions)
    for _ in range(2 * len(fractions)):
        if not todo:
            break
        result = attempt(whole * todo[0])
        if result:
            stopped += 1
            todo.pop(0)
        elif result is False:
            whole *= 0.6
    return stopped


def _episodes(folder: Path, n: int, frames: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        path = folder / f"episode_{i}.hdf5"
        with h5py.File(path, "w") as f:
            f.attrs["sim"] = True
            f.create_dataset("observations/images/top", data=rng.integers(0, 255, (frames, 120, 160, 3), np.uint8))
            f.create_dataset("observations/qpos", data=rng.normal(size=(frames, 14)).astype(np.float32))
            f.create_dataset("action", data=rng.normal(size=(frames, 14)).astype(np.float32))
        paths.append(path)
    return paths


def test_ctrl_c_stops_an_ingest_at_any_point_and_leaves_the_store_as_it_was(tmp_path):
    env = _env(tmp_path)
    (tmp_path / "src").mkdir()
    sources = [str(p) for p in _episodes(tmp_path / "src", 12, 300)]
    assert _run(["-q", "demo", "--episodes", "1", "--seconds", "2"], env).returncode == 0  # a store with something in it
    before = _files(tmp_path / "store")
    ingest = ["ingest", "hdf5", *sources, "--site", "lab", "--fps", "50", "--slice", "lab", "--workers", "2"]
    for _ in range(2):  # the second run is timed: the first compiles and caches what a fresh venv lacks
        started = time.monotonic()
        done = _run(["-q", *ingest], env)
        assert done.returncode == 0, done.stderr
        whole = time.monotonic() - started
        for blob in set(_files(tmp_path / "store")) - set(before):  # start each try from the store before
            (tmp_path / "store" / blob).unlink()
        assert _files(tmp_path / "store") == before

    def attempt(delay: float) -> bool | None:
        code, err, took = _interrupt(ingest, env, delay)
        stopped = _check_stopped(code, err, took)
        if stopped:
            assert _files(tmp_path / "store") == before, "an interrupted ingest changed the store"
        else:
            for blob in set(_files(tmp_path / "store")) - set(before):
                (tmp_path / "store" / blob).unlink()
        assert _temporaries(tmp_path / "store", tmp_path / "tmp") == []
        return stopped

    assert _stopped_at((0.2, 0.35, 0.5, 0.65, 0.8), whole, attempt) >= 3, "the ingest finished before most signals"


# SIGINTs at random instants of a pack and of an ingest, the pool busy and the import window
# included: CI sends TRIES of each; `RAYFORM_STOP_TRIES=200 python -m pytest -k random_instants
# tests/integration/test_stopping.py` is the long run. The first STARTUP_S are Python's own
# start-up, before a line of rayform runs (a Ctrl-C there ends the interpreter as CPython does);
# on a loaded machine it lasts longer, and an instant that still lands in it is drawn again.
TRIES = int(os.environ.get("RAYFORM_STOP_TRIES", "8"))
STARTUP_S = 0.05


def _whole_ingest(store: Path, before: dict[str, int]) -> None:
    """Everything the store holds beyond ``before`` is one whole ingest: its slice of every
    episode, every blob of which verifies, and no blob that nothing reaches."""
    import rayform
    from rayform.ops.references import store_closure
    from rayform.ops.verify import verify

    client = rayform.Client(store)
    try:
        s = client.slices.get("lab")
    except rayform.SliceNotFound:
        raise AssertionError(f"a stopped ingest changed the store: {sorted(set(_files(store)) ^ set(before))}") from None
    assert len(s.segments) == 8, "an interrupted ingest is in the store in part"
    reached = {r.blob for r in store_closure(client.store)}
    new = {p.rsplit("/", 1)[-1] for p in set(_files(store)) - set(before) if p.startswith("blobs/")}
    assert new <= reached, "an interrupted ingest left blobs nothing reaches"
    assert verify(client.store, store_closure(client.store)).ok


def _blob_folders(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "blobs").iterdir()) if (root / "blobs").exists() else []


@pytest.mark.timeout(max(600, 30 * TRIES))  # the long run's tries take their time
@pytest.mark.parametrize("command", ["pack", "ingest"])
def test_ctrl_c_at_random_instants_always_ends_with_one_line_and_leaves_nothing(tmp_path, command):
    import random

    env = _env(tmp_path)
    store = tmp_path / "store"
    if command == "pack":
        made = _run(["-q", "demo", "--episodes", "4", "--seconds", "6"], env)
        assert made.returncode == 0, made.stderr
        args = ["pack", made.stdout.split()[-1], "--fps", "30", "--codec", "jpeg", "--resize", "96x96", "--workers",
                "2", "--force", "--shard-size", "1MiB"]
    else:
        (tmp_path / "src").mkdir()
        sources = [str(p) for p in _episodes(tmp_path / "src", 8, 200)]
        assert _run(["-q", "demo", "--episodes", "1", "--seconds", "2"], env).returncode == 0
        args = ["ingest", "hdf5", *sources, "--site", "lab", "--fps", "50", "--slice", "lab", "--workers", "2"]
    before, folders = _files(store), _blob_folders(store)

    def as_before() -> None:  # a finished ingest is undone, so every try starts from the same store
        for blob in set(_files(store)) - set(before):
            (store / blob).unlink()
        store.joinpath("blobs") and [d.rmdir() for d in (store / "blobs").iterdir() if d.name not in folders]

    for _ in range(2):  # the second run is timed: the first compiles and caches what a fresh venv lacks
        started = time.monotonic()
        assert _run(["-q", *args], env).returncode == 0
        whole = time.monotonic() - started
        if command == "ingest":
            as_before()
    rng = random.Random(int(os.environ.get("RAYFORM_STOP_SEED", "0")))
    stopped = 0
    for _ in range(TRIES):
        for _ in range(5):  # an instant that fell in CPython's own start-up is drawn again
            code, err, took = _interrupt(args, env, rng.uniform(STARTUP_S, whole))
            result = _check_stopped(code, err, took)
            if result is not None:
                break
        if result:
            stopped += 1
            if command == "ingest" and _files(store) != before:
                # stopped while it committed: held until the commit was whole, the ingest is all in
                _whole_ingest(store, before)
                as_before()
            elif command == "ingest":
                assert _blob_folders(store) == folders, "an interrupted ingest left folders"
        else:
            # it finished first: the timed run was slower than this one (the tests share the
            # machine's cores), so the instants are drawn from a shorter run from now on
            whole = max(2 * STARTUP_S, 0.6 * whole)
            if command == "ingest":
                as_before()
        assert _temporaries(store, tmp_path / "cache", tmp_path / "tmp") == []
        assert not list(store.rglob(".gone-*"))
        scratch = tmp_path / "tmp" / "rayform-pack"
        assert not scratch.exists() or not list(scratch.iterdir()), "a stopped pack left its scratch"
        if command == "pack":
            for blob in (store / "blobs").rglob("*"):
                if blob.is_file():  # whatever a stopped pack stored is whole
                    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert stopped >= TRIES // 2, "the command finished before most signals: make it longer"


def test_a_killed_pack_leaves_no_process_and_a_rerun_sweeps_its_temporaries(tmp_path):
    env = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store"), "RAYFORM_CACHE_DIR": str(tmp_path / "cache"),
           "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    made = subprocess.run(_command("demo", "--episodes", "4", "--seconds", "6", env=env), env=env,
                          capture_output=True, text=True, timeout=300)
    slice_id = made.stdout.split()[-1]
    pack = _command("pack", slice_id, "--fps", "30", "--codec", "jpeg", "--resize", "160x160", "--workers", "2",
                    env=env)
    proc = subprocess.Popen(pack, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while len(_group(proc.pid)) < 3 and time.time() < deadline:  # the driver and its two workers
        time.sleep(0.05)
    assert len(_group(proc.pid)) >= 3, "the pack's pool never started"
    # a temporary as a killed writer leaves it: named for this host and the driver's pid
    blobs = tmp_path / "store" / "blobs" / "00"
    blobs.mkdir(parents=True, exist_ok=True)
    left = blobs / (temp_prefix().replace(f"-{os.getpid()}-", f"-{proc.pid}-") + "abcd1234")
    left.write_bytes(b"half a shard")
    foreign = blobs / ".tmp-otherhost-1-abcd1234"  # another machine's, recent: not ours to judge
    foreign.write_bytes(b"x")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.time() + 15
    while _group(proc.pid) and time.time() < deadline:
        time.sleep(0.1)
    assert _group(proc.pid) == [], "processes of the killed pack live on"
    assert proc.stdout.read() is not None  # EOF: nothing holds the caller's pipe open

    rerun = subprocess.run(pack, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert not left.exists() and foreign.exists()
    assert not [p for p in (tmp_path / "tmp" / "rayform-pack").iterdir()]


_LANDINGS = {
    # a string exec, as dataclasses make their methods during an import: CPython marks the
    # interrupt as unhandled and, under ``python -m``, ends the process by SIGINT (-2) at exit
    "string exec": "exec('raise KeyboardInterrupt', {})",
    # a class's making: Python 3.11 wraps it as RuntimeError('Error calling __set_name__ ...')
    "__set_name__": "class D:\n"
                    "        def __set_name__(self, owner, name):\n"
                    "            raise KeyboardInterrupt\n"
                    "    type('C', (), {'d': D()})",
}


@pytest.mark.parametrize("landing", list(_LANDINGS))
def test_a_ctrl_c_landing_inside_pythons_own_machinery_still_exits_130(tmp_path, landing):
    """Wherever a Ctrl-C lands, the command ends with one line and 130, under ``python -m``."""
    (tmp_path / "interrupted_command.py").write_text(
        "import rayform.cli.main as cli\n"
        "def _run(argv):\n"
        f"    {_LANDINGS[landing]}\n"
        "cli._run = _run\n"
        "cli.command()\n")
    env = {**_env(tmp_path), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "interrupted_command"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == "rayform: interrupted"
