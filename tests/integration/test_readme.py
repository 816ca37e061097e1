"""Every code block and shell line of the README runs as written, in the order it is written,
on a fresh store, as a new user would run them (the install block is CI's own): nothing made
for it beforehand, nothing read from ``../shared`` that the README does not fall back from,
nothing written outside temporary directories."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]


def _blocks() -> list[tuple[str, str]]:
    """``(kind, code)`` of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(\w+)\n(.*?)```", (ROOT / "README.md").read_text(), re.S)]


def test_the_readme_runs_as_written(tmp_path, monkeypatch, request):
    home = tmp_path / "home"  # the user's: the default store and cache live under it
    home.mkdir()
    for var in ("RAYFORM_STORE", "RAYFORM_CACHE_DIR", "RAYFORM_CONFIG", "RAYFORM_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    # the user's temporary folder, short as a user's is: multiprocessing's forkserver puts its
    # socket in it, and a Unix socket's path holds 107 bytes (pytest's own folders, past its
    # 100th run, left too few)
    tmp = Path(tempfile.mkdtemp(prefix="rf-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # mkdtemp() follows TMPDIR
    monkeypatch.chdir(ROOT)
    env = dict(os.environ)
    blocks = _blocks()
    assert blocks[0][0] == "bash" and "pip install" in blocks[0][1]  # the two commands: CI runs them
    scope: dict = {"__name__": "__main__"}
    ran = {"python": 0, "bash": 0}
    for n, (kind, code) in enumerate(blocks[1:], 1):
        if kind == "python":
            exec(compile(code, f"README.md python block {n}", "exec"), scope)
        elif kind == "bash":
            for line in filter(None, (line.split("  #")[0].strip() for line in code.splitlines())):
                if line.startswith("rayform view"):
                    _look_and_stop(line, env)
                    continue
                done = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, (line, done.stderr[-2000:])
        else:
            continue
        ran[kind] += 1
    assert ran["python"] >= 6 and ran["bash"] >= 5
    # what the blocks made is what they say
    assert scope["slice_"].name == "pick-v1" and scope["pack"].samples > 0
    assert scope["state"]["step"] == len(scope["dataset"]) // 64  # the streamed epoch, to its end
    store = home / ".local" / "share" / "rayform" / "store"
    assert (store / "refs" / "slices").is_dir()
    assert not (ROOT / "rayform-preview").exists() and not list(Path("/tmp").glob("rayform-*-readme*"))


def _look_and_stop(line: str, env: dict[str, str]) -> None:
    """A server's line, as its user runs it: started, its printed address opened (the page and
    the store's sites), then Ctrl-C, which ends it cleanly."""
    import json
    import signal
    import urllib.request

    server = subprocess.Popen(["bash", "-c", f"exec {line}"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        said = server.stdout.readline()
        url = said[said.index("http://"):].split()[0]
        with urllib.request.urlopen(url, timeout=60) as page:
            assert page.status == 200 and b"/static/routes.js" in page.read()
        with urllib.request.urlopen(url + "api/sites", timeout=60) as sites:
            assert json.loads(sites.read())  # the demo's site, made by the lines before
    finally:
        server.send_signal(signal.SIGINT)
        code = server.wait(timeout=30)
    assert code in (0, 130), (line, server.stderr.read() if server.stderr else "")
