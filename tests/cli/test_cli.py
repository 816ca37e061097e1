"""The rayform command, run as a user runs it: a real subprocess, exit codes and output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest


def run(*args: str, store, env=None) -> subprocess.CompletedProcess:
    e = {**os.environ, "RAYFORM_STORE": str(store), **(env or {})}
    return subprocess.run([sys.executable, "-m", "rayform.cli.main", "-q", *args], capture_output=True,
                          text=True, env=e, timeout=300)


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("cli") / "store"
    r = run("demo", "--episodes", "2", "--seconds", "2", store=store)
    assert r.returncode == 0, r.stderr
    return store, r.stdout.strip().splitlines()[-1]


def test_demo_prints_a_slice_id_that_lists(demo_store):
    store, slice_id = demo_store
    assert slice_id.startswith("slc_")
    assert slice_id in run("slices", "ls", store=store).stdout
    assert run("segments", "ls", "--site", "demo", store=store).stdout.count("seg_") == 2


def test_pack_with_one_and_two_workers_prints_the_same_hashes(demo_store):
    store, slice_id = demo_store
    one = run("pack", slice_id, "--fps", "15", "--workers", "1", "--shard-size", "200KB", store=store)
    two = run("pack", slice_id, "--fps", "15", "--workers", "2", "--shard-size", "200KB", "--force", store=store)
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    hashes = [line.split()[0] for line in one.stdout.splitlines() if line.startswith("  ")]
    assert len(hashes) > 1 and hashes == [line.split()[0] for line in two.stdout.splitlines() if line.startswith("  ")]
    shown = run("slices", "show", slice_id, store=store).stdout
    assert "cam0/rgb" in shown and "fps15-" in shown


def test_verify_ok_then_bad_after_a_flipped_byte(demo_store, tmp_path):
    import shutil

    store, slice_id = demo_store
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    assert run("pack", slice_id, "--fps", "15", store=copy).returncode == 0
    ok = run("verify", slice_id, store=copy)
    assert ok.returncode == 0 and ": ok" in ok.stdout
    shard = next(line.split()[0] for line in run("pack", slice_id, "--fps", "15", store=copy).stdout.splitlines()
                 if line.startswith("  "))
    path = copy / "blobs" / shard[:2] / shard
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[777] ^= 0x40
    path.write_bytes(bytes(data))
    bad = run("verify", slice_id, store=copy)
    assert bad.returncode == 1
    assert f"blob {shard[:16]}" in bad.stdout and "shard 0" in bad.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("slices", "show", "slc_00000000"), "slc_00000000: no such slice"),
        (("pack", "slc_00000000", "--fps", "15"), "no such slice"),
        (("pack", "SLICE", "--fps", "15", "--streams", "cam0/rgb,nope"), "no stream 'nope'"),
        (("pack", "SLICE", "--fps", "15", "--shard-size", "lots"), "size 'lots'"),
        (("pack", "SLICE", "--fps", "-3"), "fps -3"),
        (("pack", "SLICE", "--fps", "1e-9"), "fps 1e-09"),
        (("verify", "SLICE", "--fps", "7"), "no pack at 7 fps to verify"),
        (("pack", "SLICE", "--fps", "nan"), "fps nan"),
        (("pack", "SLICE", "--fps", "15", "--resize", "0x0"), "resize (0, 0)"),
        (("pack", "SLICE", "--fps", "15", "--resize", "big"), "resize 'big'"),
        (("pack", "SLICE", "--fps", "15", "--workers", "0"), "--workers: 0: it must be 1 or more"),
        (("pack", "SLICE", "--fps", "15", "--clip-frames", "0"), "--clip-frames: 0: it must be from 1 to 256"),
        (("ingest", "rlds", "x", "--site", "x", "--workers", "0"), "--workers: 0"),
        (("show", "SLICE", "--segments", "-1"), "--segments: -1: it must be 0 or more"),
        (("view", "--port", "70000"), "--port: 70000: it must be from 0 to 65535"),
        (("demo", "--seconds", "0"), "--seconds: 0 must be a number above 0"),
        (("ingest", "lerobot", "README.md", "--site", "x"), "README.md: not a folder"),
        (("ingest", "rlds", "README.md", "--site", "x"), "README.md: not a folder"),
        (("ingest", "hdf5", "docs", "--site", "x"), "docs: a folder; ingest hdf5 takes HDF5 files"),
        (("--store", "nosuchproto://x/y", "slices", "ls"), "nosuchproto://x/y"),
        (("ingest", "hdf5", "/no/such.hdf5", "--site", "x"), "/no/such.hdf5: no such file"),
        (("ingest", "hdf5", "README.md", "--site", "x", "--fps", "0"), "option 'fps' (--fps): a positive number"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(demo_store, args, message):
    store, slice_id = demo_store
    r = run(*[slice_id if a == "SLICE" else a for a in args], store=store)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_a_bad_pack_workers_variable_is_one_line_and_exit_2(demo_store):
    store, slice_id = demo_store
    r = run("pack", slice_id, "--fps", "7", "--force", store=store, env={"RAYFORM_PACK_WORKERS": "abc"})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "rayform: error: RAYFORM_PACK_WORKERS='abc': must be a whole number of processes, 1..4096"], r.stderr


def test_a_cache_dir_that_is_a_file_is_one_clear_error(tmp_path, monkeypatch):
    import uuid

    import rayform
    from rayform.converters.demo import DemoConfig, ingest_demo

    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(tmp_path / "a-file"))
    client = rayform.Client(f"memory://cli-{uuid.uuid4().hex[:8]}")
    s = client.slices.create(ingest_demo(client, "lab", DemoConfig(episodes=1, seconds=1.0, image_size=16),
                                         progress=False))
    with pytest.raises(rayform.RayformError, match=f"cache {tmp_path / 'a-file'}: unusable.*RAYFORM_CACHE_DIR"):
        client.slices.get(s.id)


def test_an_unwritable_store_is_one_line(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere: make the "directory" a file instead
        (tmp_path / "store").write_text("not a directory")
    else:
        tmp_path.chmod(0o500)
    r = run("demo", "--episodes", "1", "--seconds", "1", store=tmp_path / "store" / "inner")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "cannot write" in r.stderr, r.stderr
    assert "writable directory" in r.stderr


@pytest.mark.parametrize("command", [["segments", "ls"], ["slices", "ls"], ["verify", "demo"], ["gc"],
                                     ["show", "demo"], ["pull", "demo"]])
def test_a_mistyped_store_is_an_error_for_a_command_that_reads_and_is_not_made(tmp_path, command):
    typo = tmp_path / "stroe"
    r = run(*command, store=typo)
    assert r.returncode == 2 and r.stderr.startswith(f"rayform: error: store {typo}: no such directory"), r.stderr
    assert not typo.exists()


def test_an_unexpected_failure_is_one_line_exit_1_and_a_traceback_with_debug(demo_store, tmp_path):
    store, slice_id = demo_store
    crash = tmp_path / "sitecustomize.py"  # makes listing fail the way a bug would
    crash.write_text("import rayform.recordings.slices as s\n"
                     "def boom(self):\n    raise ZeroDivisionError('a bug')\n"
                     "s.Slices.list = boom\n")
    env = {"PYTHONPATH": str(tmp_path)}
    r = run("slices", "ls", store=store, env=env)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "rayform: error: ZeroDivisionError: a bug. Run again with --debug for the traceback"], r.stderr
    r = run("--debug", "slices", "ls", store=store, env=env)
    assert r.returncode == 1 and "Traceback" in r.stderr


def test_ingest_lists_converts_and_refuses_cleanly(real_data, tmp_path):
    store = tmp_path / "store"
    v21 = str(real_data / "lerobot_v21_unitree_g1_subset")
    listed = run("ingest", "lerobot", v21, "--list", store=store)
    assert listed.returncode == 0 and "2 present (736 frames" in listed.stdout and "cam_high/rgb" in listed.stdout
    refused = run("ingest", "lerobot", v21, "--site", "g1", store=store)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and "--allow-missing" in refused.stderr
    done = run("ingest", "lerobot", v21, "--site", "g1", "--allow-missing", "--slice", "g1",
               "--map", "observation.state=joints/position", "--map", "action=", store=store)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert sum(line.startswith("seg_") for line in lines) == 2 and lines[-2].startswith("slc_")
    shown = run("slices", "show", lines[-2], store=store).stdout
    assert "joints/position" in shown and "action/value" not in shown and "cam_high/rgb" in shown


def test_global_options_go_before_or_after_the_command(demo_store, tmp_path):
    store, slice_id = demo_store
    elsewhere = tmp_path / "nowhere"  # RAYFORM_STORE points here; --store says where to look
    for args in (("--store", str(store), "slices", "ls"), ("slices", "ls", "--store", str(store)),
                 ("slices", "ls", "--store", str(store), "-o", "auto_mkdir=true")):
        r = run(*args, store=elsewhere)
        assert r.returncode == 0 and slice_id in r.stdout, (args, r.stderr)
    version = run("--version", store=elsewhere)
    assert version.returncode == 0 and version.stdout.startswith("rayform ")


def test_storage_options_are_parsed_one_way():
    from rayform.cli.commands import storage_options
    from rayform.errors import InvalidInput

    assert storage_options(["endpoint_url=http://h:9000", "anon=true", "retries=3", "key=a=b"]) == {
        "endpoint_url": "http://h:9000", "anon": True, "retries": 3, "key": "a=b"}
    for bad in ("noequals", "=value"):
        with pytest.raises(InvalidInput, match="key=value"):
            storage_options([bad])



def test_slices_split_prints_each_child_and_refuses_bad_shares(demo_store):
    from rayform.recordings.splits import split_of

    store, slice_id = demo_store
    segments = [line.split()[0] for line in run("segments", "ls", store=store).stdout.splitlines()]
    halves = {"train": 0.5, "val": 0.5}
    seed = next(n for n in range(64) if len({split_of(s, halves, n) for s in segments}) == 2)
    r = run("slices", "split", slice_id, "train=0.5", "val=0.5", "--seed", str(seed), store=store)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["train", "val"]
    assert all(line.split()[1].startswith("slc_") and line.split()[2] == "1" for line in lines)
    for bad in (["train"], ["train=0.7", "val=0.7"], ["train=x"], ["train=1", "val=0"]):
        r = run("slices", "split", slice_id, *bad, store=store)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "rayform: error:" in r.stderr, (bad, r.stderr)


def test_every_flag_and_argument_has_help_text():
    import argparse

    from rayform.cli.parser import parser as _parser

    def walk(parser: argparse.ArgumentParser, path: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                yield path, action

    missing = [f"{path} {action.option_strings or action.dest}" for path, action in walk(_parser(), "rayform")
               if not action.help]
    assert missing == []


def test_listings_print_json_for_scripts(demo_store):
    import json

    store, slice_id = demo_store
    slices = json.loads(run("slices", "ls", "--json", store=store).stdout)
    assert slice_id in [s["id"] for s in slices] and all(set(s) >= {"id", "name", "segments", "sites"} for s in slices)
    segments = json.loads(run("segments", "ls", "--json", store=store).stdout)
    assert len(segments) == 2 and all(s["id"].startswith("seg_") and len(s["version"]) == 64 for s in segments)
    shown = json.loads(run("show", slice_id, "--json", store=store).stdout)
    assert shown["id"] == slice_id and shown["segments_total"] == 2
    cam = shown["segments"][0]["streams"]["cam0/rgb"]
    assert cam["kind"] == "image" and cam["encoding"] == "jpeg" and 29 < cam["rate_hz"] < 31 and cam["count"] > 10
    one = json.loads(run("show", segments[0]["id"], "--json", store=store).stdout)
    assert one["version"] == segments[0]["version"] and one["streams"]["joints/position"]["units"] == "rad"


def test_show_says_what_a_slice_and_a_segment_hold(demo_store):
    store, slice_id = demo_store
    assert run("pack", slice_id, "--fps", "15", store=store).returncode == 0
    r = run("show", slice_id, store=store)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"slice {slice_id}") and "2 segments" in lines[0]
    cam = next(line for line in lines if line.strip().startswith("cam0/rgb"))
    # the demo's camera: 30 Hz JPEG frames of 8-bit pixels, 2 seconds
    assert "image" in cam and "jpeg" in cam and "8-bit unsigned integer" in cam and " Hz " in cam and "2.0 s" in cam
    joints = next(line for line in lines if line.strip().startswith("joints/position"))
    assert "32-bit float" in joints and "in rad" in joints and "names joint_0" in joints and "100 Hz" in joints
    assert any("fps" in line and "samples" in line and "dropped" in line for line in lines)  # the packs
    segment = lines[1].split()[0].split("@")[0]
    one = run("show", segment, store=store)
    assert one.returncode == 0 and one.stdout.splitlines()[0].strip().startswith(segment)
    missing = run("show", "slc_00000000", store=store)
    assert missing.returncode == 2 and "no such slice" in missing.stderr


def test_the_config_file_and_its_profiles_fill_what_the_command_line_leaves_unset(demo_store, tmp_path):
    store, slice_id = demo_store
    other = tmp_path / "other"
    config = tmp_path / "config.toml"
    config.write_text(f'[default]\nstore = "{tmp_path / "empty"}"\n\n'
                      f'[profiles.lab]\nstore = "{store}"\noptions = {{ auto_mkdir = true }}\n')
    env = {"RAYFORM_CONFIG": str(config), "RAYFORM_STORE": ""}
    assert slice_id not in run("slices", "ls", store="", env=env).stdout  # [default]: an empty store
    assert slice_id in run("slices", "ls", "--profile", "lab", store="", env=env).stdout
    assert slice_id in run("slices", "ls", store="", env={**env, "RAYFORM_PROFILE": "lab"}).stdout
    assert slice_id not in run("--store", str(other), "slices", "ls", "--profile", "lab", store="", env=env).stdout
    assert slice_id not in run("slices", "ls", "--profile", "lab", store=str(other),  # RAYFORM_STORE wins too
                               env={"RAYFORM_CONFIG": str(config)}).stdout
    missing = run("slices", "ls", "--profile", "field", store="", env=env)
    assert missing.returncode == 2 and "profile 'field': not in" in missing.stderr and "lab" in missing.stderr
    config.write_text("[default\nstore = 1\n")
    bad = run("slices", "ls", store="", env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a readable TOML file" in bad.stderr
    config.write_text('[default]\nstroe = "x"\n')
    assert "unknown key 'stroe'" in run("slices", "ls", store="", env=env).stderr


def test_push_copies_a_slice_that_then_shows_and_verifies_at_the_destination(demo_store, tmp_path):
    store, slice_id = demo_store
    dest = tmp_path / "dest"
    first = run("push", slice_id, str(dest), store=store)
    assert first.returncode == 0, first.stderr
    assert re.fullmatch(rf"{slice_id} -> {dest}: copied \d+ blobs \([\d.]+ \w?i?B\), 0 already there \(.*\)\n",
                        first.stdout), first.stdout
    again = run("push", slice_id, str(dest), store=store)
    assert re.search(r"copied 0 blobs \(0 B\), \d+ already there", again.stdout), again.stdout
    assert run("verify", slice_id, store=dest).returncode == 0
    assert run("show", slice_id, store=dest).stdout == run("show", slice_id, store=store).stdout.replace(
        str(store), str(dest))


def test_gc_is_a_dry_run_unless_told_and_keeps_young_blobs(demo_store, tmp_path):
    import shutil

    store, slice_id = demo_store
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    orphan = copy / "blobs" / "ab" / ("ab" + "0" * 62)
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(b"not even its own hash; no ref names it")
    os.utime(orphan, (os.path.getmtime(orphan) - 60,) * 2)  # older than a store's clock can blur
    r = run("gc", store=copy)
    assert r.returncode == 0 and "would delete 0 unreachable blobs" in r.stdout and "kept" in r.stdout, r.stdout
    r = run("gc", "--grace", "0", store=copy)
    assert "would delete 1 unreachable blob (" in r.stdout and "--delete" in r.stdout and orphan.exists()
    assert "written in the last" not in r.stdout  # nothing is young with no grace: not "in the last 0"
    r = run("gc", "--grace", "0", "--delete", store=copy)  # beside a running writer it would take its blobs
    assert r.returncode == 2 and "--force" in r.stderr and len(r.stderr.strip().splitlines()) == 1 and orphan.exists()
    r = run("gc", "--grace", "9m", "--delete", store=copy)
    assert r.returncode == 2 and orphan.exists()
    r = run("gc", "--grace", "0", "--delete", "--force", store=copy)
    assert "deleted 1 unreachable blob (" in r.stdout and not orphan.exists()
    assert run("verify", slice_id, store=copy).returncode == 0


def test_listings_have_a_header_and_counts_read_as_words(demo_store, tmp_path):
    store, slice_id = demo_store
    segments = run("segments", "ls", store=store).stdout.splitlines()
    assert segments[0].split() == ["segment", "version", "site", "seconds", "name"] and len(segments) == 3
    slices = run("slices", "ls", store=store).stdout.splitlines()
    assert slices[0].split() == ["slice", "segments", "sites", "name"] and slice_id in "\n".join(slices[1:])
    one = run("demo", "--site", "solo", "--episodes", "1", "--seconds", "1", store=tmp_path / "one")
    assert "1 demo segment at site 'solo'" in one.stdout, one.stdout
    shown = run("show", one.stdout.split()[-1], store=tmp_path / "one").stdout
    assert " 1 segment " in shown and "1 segments" not in shown


def test_slices_show_says_element_types_in_words(demo_store):
    store, slice_id = demo_store
    shown = run("slices", "show", slice_id, store=store).stdout
    assert "32-bit float" in shown and "8-bit unsigned integer" in shown
    assert "<f4" not in shown and "|u1" not in shown


def test_a_repeated_pack_says_it_exists_already(demo_store):
    store, slice_id = demo_store
    first = run("pack", slice_id, "--fps", "5", store=store)
    again = run("pack", slice_id, "--fps", "5", store=store)
    assert first.returncode == again.returncode == 0
    assert "exists already" not in first.stdout
    assert "exists already" in again.stdout and "--force" in again.stdout
    assert first.stdout.splitlines()[-1] == again.stdout.splitlines()[-1]  # the same pack


def test_the_demo_slice_is_found_by_its_name(demo_store):
    store, slice_id = demo_store
    shown = run("show", "demo", store=store)
    assert shown.returncode == 0 and f"slice {slice_id}" in shown.stdout


def test_a_config_file_that_is_not_there_is_an_error_not_no_settings(demo_store, tmp_path):
    store, _ = demo_store
    r = run("slices", "ls", store=store, env={"RAYFORM_CONFIG": str(tmp_path / "cofnig.toml")})
    assert r.returncode == 2 and r.stderr.startswith(f"rayform: error: RAYFORM_CONFIG={tmp_path / 'cofnig.toml'}: "
                                                     "no such file"), r.stderr


def test_an_error_starts_a_line_of_its_own_after_a_progress_bar(tmp_path):
    """A failure mid-progress: the bar is cleared, never left with the message glued to it."""
    (tmp_path / "bad.hdf5").write_bytes(b"not hdf5")
    e = {**os.environ, "RAYFORM_STORE": str(tmp_path / "store")}
    r = subprocess.run([sys.executable, "-m", "rayform.cli.main", "ingest", "hdf5", str(tmp_path / "bad.hdf5"),
                        str(tmp_path / "bad.hdf5"), "--site", "lab", "--workers", "1"],
                       capture_output=True, text=True, env=e, timeout=120)
    assert r.returncode == 2
    pieces = [p for p in re.split(r"[\r\n]", r.stderr) if "rayform: error" in p]
    assert pieces and all(p.startswith("rayform: error: ") for p in pieces), repr(r.stderr[-500:])


def test_show_says_how_each_pack_differs_and_which_a_dataset_reads(demo_store, tmp_path):
    import shutil

    store, slice_id = demo_store
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    keys = {}
    for name, extra in (("full", []), ("small", ["--resize", "8x8"]), ("seed", ["--interleave-seed", "5"])):
        out = run("pack", slice_id, "--fps", "10", *extra, store=copy).stdout
        keys[name] = re.search(r"pack (fps10-[0-9a-f]{8}) of", out).group(1)
    shown = run("show", slice_id, "--segments", "0", store=copy).stdout
    lines = shown.splitlines()

    def about(key: str) -> str:
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(key))
        return lines[at] + "\n" + lines[at + 1]

    assert "images keep, resized 8x8" in about(keys["small"]) and "apart: resize 8x8" in about(keys["small"])
    assert "interleave seed 5" in about(keys["seed"]) and "read by default at 10 fps" in about(keys["seed"])
    assert "read by default" not in about(keys["full"]) + about(keys["small"])  # the newest full-size one is
    stats = run("stats", slice_id, "--pack", keys["small"], store=copy)
    assert stats.returncode == 0 and f"({keys['small']})" in stats.stdout, stats.stderr
    described = json.loads(run("show", slice_id, "--json", store=copy).stdout)["packs"]
    assert {p["key"]: p["resize"] for p in described}[keys["small"]] == [8, 8]


def test_segments_by_query_listed_limited_sliced_and_compacted(tmp_path):
    """The catalog from the command line: ``segments ls --where/--limit``, ``slices create
    --where`` and ``segments compact``; a bad query is one line and exit 2."""
    store = tmp_path / "store"
    for seconds in ("2", "4"):  # two ingests: two parts of the site's catalog
        assert run("demo", "--site", f"s{seconds}", "--episodes", "3", "--seconds", seconds, store=store).returncode == 0
    listed = run("segments", "ls", "--where", "duration > 3", store=store).stdout.splitlines()
    assert listed[0].split() == ["segment", "version", "site", "seconds", "name"]
    assert len(listed) == 4 and all(line.split()[2] == "s4" for line in listed[1:])
    assert len(run("segments", "ls", "--limit", "2", store=store).stdout.splitlines()) == 3
    as_json = json.loads(run("segments", "ls", "--json", "--where", "site == 's2'", store=store).stdout)
    assert [r["site"] for r in as_json] == ["s2"] * 3 and all(r["duration_s"] < 3 for r in as_json)
    made = run("slices", "create", "--where", "duration > 3 and has('cam0/rgb')", "--name", "long", store=store)
    assert made.returncode == 0, made.stderr
    shown = json.loads(run("show", "long", "--json", store=store).stdout)
    assert shown["segments_total"] == 3
    bad = run("slices", "create", "--where", "duration >>> 3", store=store)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "where" in bad.stderr and "Traceback" not in bad.stderr
    compacted = run("segments", "compact", store=store)
    assert compacted.returncode == 0 and "site s2:" in compacted.stdout, compacted.stderr
    assert len(list((store / "refs" / "catalog" / "s2").glob("*.json"))) == 1
    again = run("segments", "ls", store=store).stdout.splitlines()
    assert len(again) == 7 and again == run("segments", "ls", store=store).stdout.splitlines()


def test_view_without_its_extra_or_its_port_is_one_line(demo_store, tmp_path):
    import socket

    store, _ = demo_store
    fake = tmp_path / "no-aiohttp" / "aiohttp"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('aiohttp is not installed')\n")
    r = run("view", store=store, env={"PYTHONPATH": str(fake.parent)})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        'rayform: error: rayform view needs the view extra: pip install "rayform[view]"'], r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        r = run("view", "--port", str(taken.getsockname()[1]), store=store)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "try --port 0" in lines[0], r.stderr


def test_a_progress_bar_ctrl_c_caught_half_made_is_let_go_quietly():
    """Ctrl-C can land inside tqdm's __init__, after the bar is listed and before it has a
    position: closing the bars after it must not raise (it printed a traceback, exit 1)."""
    import tqdm

    from rayform.cli.main import _close_bars

    half = tqdm.tqdm.__new__(tqdm.tqdm)  # listed, never initialised
    assert half in tqdm.tqdm._instances and not hasattr(half, "pos")
    whole = tqdm.tqdm(total=3, disable=False, file=open(os.devnull, "w"))
    _close_bars()
    assert half not in tqdm.tqdm._instances and whole not in tqdm.tqdm._instances


def test_every_option_with_a_default_says_it_in_its_help():
    import argparse

    from rayform.cli.parser import parser

    silent = []

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.option_strings and action.help not in (None, argparse.SUPPRESS) and \
                    action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in action.help:
                silent.append(f"{path} {action.option_strings[-1]} (default {action.default!r})")

    walk(parser(), "rayform")
    assert not silent, silent


def test_a_half_step_crf_packs_and_a_crf_between_steps_is_one_line_and_exit_2(demo_store):
    """x264 takes a CRF in halves: ``--crf 30.5`` packs, ``show`` says it; 30.3 (between its
    steps), 30.5 for AV1 (whole numbers only), 99, NaN and text are each one line, exit 2,
    nothing packed."""
    store, slice_id = demo_store
    r = run("pack", slice_id, "--fps", "5", "--codec", "h264", "--crf", "30.5", "--horizon", "2", store=store)
    assert r.returncode == 0, r.stderr
    assert "crf 30.5" in run("show", slice_id, store=store).stdout
    before = sorted(p.relative_to(store) for p in store.rglob("*"))
    for codec, crf, says in (("h264", "30.3", "video crf 30.3: a number 0..63 in steps of 0.5 for h264"),
                             ("av1", "30.5", "video crf 30.5: a number 0..63, whole for av1"),
                             ("h264", "99", "video crf 99: a number 0..63 in steps of 0.5 for h264"),
                             ("av1", "nan", "video crf nan: a number 0..63, whole for av1"),
                             ("h264", "high", "'high' is not a number")):
        r = run("pack", slice_id, "--fps", "5", "--codec", codec, "--crf", crf, "--horizon", "2", store=store)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.relative_to(store) for p in store.rglob("*")) == before
