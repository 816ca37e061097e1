"""Ingest of several sources: all or nothing, whatever fails and wherever."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import rayform
from rayform.errors import InvalidInput


def _episode(path, frames: int = 20, seed: int = 0):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs["sim"] = True
        f.create_dataset("observations/images/top", data=rng.integers(0, 255, (frames, 12, 16, 3), np.uint8))
        f.create_dataset("observations/qpos", data=rng.normal(size=(frames, 4)).astype(np.float32))
        f.create_dataset("action", data=rng.normal(size=(frames, 4)).astype(np.float32))
    return path


def _store_files(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("bad_at", [0, 2])
def test_a_failing_source_leaves_the_store_as_it_found_it_and_says_so(tmp_path, workers, bad_at):
    client = rayform.Client(tmp_path / "store")
    client.slices.create(client.ingest("hdf5", [_episode(tmp_path / "old.hdf5", seed=9)], "lab",
                                options={"fps": 10}, progress=False).segments, name="before")
    before = _store_files(tmp_path / "store")
    sources = [_episode(tmp_path / f"ep{i}.hdf5", seed=i) for i in range(3)]
    sources[bad_at].write_bytes(sources[bad_at].read_bytes()[:300])  # truncated
    with pytest.raises(InvalidInput, match=f"{sources[bad_at]}.*Nothing of this ingest of 3 sources was stored"):
        client.ingest("hdf5", sources, "lab", options={"fps": 10}, slice_name="new", workers=workers,
               progress=False)
    assert _store_files(tmp_path / "store") == before  # no segment, no slice, no blob left


def test_all_sources_become_visible_together_with_their_slice(tmp_path):
    client = rayform.Client(tmp_path / "store")
    sources = [_episode(tmp_path / f"ep{i}.hdf5", seed=i) for i in range(3)]
    report = client.ingest("hdf5", sources, "lab", options={"fps": 10}, slice_name="three", workers=2,
                    progress=False)
    assert [r.name for r in report.segments] == ["ep0", "ep1", "ep2"]
    assert client.slices.get("three") == report.slice and len(client.segments.list("lab")) == 3


@pytest.mark.parametrize("lands", ["before the commit", "during the commit"])
def test_a_ctrl_c_after_the_tasks_either_takes_the_ingest_back_or_lets_it_in_whole(tmp_path, monkeypatch, lands):
    """The instant between the pool's end and the commit: a Ctrl-C there once stopped the
    command with every task's blobs stored and nothing referencing them. One held through the
    commit is answered as the hold ends, the ingest whole."""
    import contextlib

    from rayform.converters import ingest as ingest_module
    from rayform.ops.references import store_closure

    client = rayform.Client(tmp_path / "store")
    client.slices.create(client.ingest("hdf5", [_episode(tmp_path / "old.hdf5", seed=9)], "lab",
                                options={"fps": 10}, progress=False).segments, name="before")
    before = _store_files(tmp_path / "store")

    @contextlib.contextmanager
    def ctrl_c_lands():
        if lands == "before the commit":
            raise KeyboardInterrupt
        yield
        raise KeyboardInterrupt  # held until the commit was whole

    monkeypatch.setattr(ingest_module, "held", ctrl_c_lands)
    sources = [_episode(tmp_path / f"ep{i}.hdf5", seed=i) for i in range(3)]
    with pytest.raises(KeyboardInterrupt):
        client.ingest("hdf5", sources, "lab", options={"fps": 10}, slice_name="new", workers=2, progress=False)
    after = _store_files(tmp_path / "store")
    if lands == "before the commit":
        assert after == before  # no blob of the three sources is left
    else:
        assert len(client.slices.get("new").segments) == 3
        reached = {r.blob for r in store_closure(client.store)}
        new_blobs = {p.rsplit("/", 1)[-1] for p in set(after) - set(before) if p.startswith("blobs/")}
        assert new_blobs and new_blobs <= reached


def test_a_format_without_its_extra_names_the_pip_install(client, monkeypatch):
    import importlib.util

    from rayform.converters.formats import describe

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("h5py", "rosbags") else real(name, *a))
    for fmt, extra in (("hdf5", "hdf5"), ("ros", "ros")):
        with pytest.raises(InvalidInput, match=rf"pip install 'rayform\[{extra}\]'"):
            client.ingest(fmt, ["x"], "lab", progress=False)
        with pytest.raises(InvalidInput, match=rf"pip install 'rayform\[{extra}\]'"):
            describe(fmt, "x")


def test_limits_declared_at_ingest_flag_the_samples_outside_and_a_wrong_name_is_one_line(tmp_path):
    import json
    import os
    import subprocess
    import sys

    source = _episode(tmp_path / "ep.hdf5")  # normal joints: some past one radian, none past ten
    env = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store")}

    def rayform_(*args):
        return subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", *args], capture_output=True, text=True,
                              env=env, timeout=300)

    loose = rayform_("ingest", "hdf5", str(source), "--site", "wide", "--fps", "10", "--limits", "joints/position=-10:10")
    tight = rayform_("ingest", "hdf5", str(source), "--site", "tight", "--fps", "10", "--limits", "joints/position=-1:1")
    assert loose.returncode == tight.returncode == 0, loose.stderr + tight.stderr
    report = json.loads(rayform_("doctor", "--json").stdout)
    [episode] = report["findings"]
    [finding] = episode["findings"]
    with h5py.File(source) as f:
        outside = int((np.abs(f["observations/qpos"][:]) > 1).any(axis=1).sum())
    assert (episode["site"], finding["kind"], finding["stream"], finding["value"]) == \
        ("tight", "out_of_range", "joints/position", outside)
    before = sorted(p.name for p in (tmp_path / "store").rglob("*"))
    for bad, said in ((["--limits", "nosuch=-1:1"], "its array streams: joints/position, action/value"),
                      (["--limits", "joints/position=1"], "STREAM=LOW:HIGH"),
                      (["--limits", "joints/position=1:-1"], "above its high")):
        r = rayform_("ingest", "hdf5", str(source), "--site", "lab", "--fps", "10", *bad)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(p.name for p in (tmp_path / "store").rglob("*")) == before
