"""Every code block and shell line of the README runs as written, in order, on a fresh store
whose demo slice stands for the product page's slice id (the install block is CI's own)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = "slc_7c1e04aa"


def _blocks(kind: str) -> list[str]:
    return [m.group(1) for m in re.finditer(rf"```{kind}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)]


def test_the_readme_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYFORM_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    env = dict(os.environ)
    client = rayform.Client()
    refs = ingest_demo(client, "demo", DemoConfig(episodes=2, seconds=4.0, image_size=64), progress=False)
    demo = client.slices.create(refs, name="demo-demo")
    client.pack(demo, 15, workers=1, progress=False)

    python = _blocks("python")
    assert len(python) >= 4
    scope: dict = {}
    for n, code in enumerate(python):
        exec(compile(code.replace(PLACEHOLDER, demo.id), f"README.md python block {n}", "exec"), scope)
    assert scope["pack"].samples > 0 and scope["slice_"].name == "pick-v1"
    mixed = scope["dataset"]
    assert mixed.weights == [0.7, 0.3] and len(mixed) == demo_samples(client, demo) + scope["pack"].samples

    shell = [line.split("  #")[0].strip() for block in _blocks("bash")[1:] for line in block.splitlines()]
    assert shell
    for line in filter(None, shell):
        done = subprocess.run(["bash", "-c", line.replace(PLACEHOLDER, demo.id)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, (line, done.stderr[-2000:])


def demo_samples(client: rayform.Client, demo: rayform.Slice) -> int:
    return client.packs.find(demo, 15).samples
