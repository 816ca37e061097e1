"""The source-format registry (``rayform.converters.formats.FORMATS``) is the one place a
format is described: the CLI, ``ingest`` and its tasks read it, every extra it names is one the
package declares, and no module keeps a list of formats or an if-chain over them of its own."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import tomllib

from rayform.converters.formats import FORMATS, SourceFormat, source_format
from rayform.converters.source_options import COMMON, FIELDS, TASK_PARTS, SourceOptions
from rayform.errors import InvalidInput

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_offers_exactly_the_registered_formats():
    from rayform.cli.parser import parser

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["ingest"]
    fmt = next(a for a in sub._actions if a.dest == "format")
    assert sorted(fmt.choices) == sorted(FORMATS)


def test_every_extra_a_format_names_is_declared():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for f in FORMATS.values():
        assert isinstance(f, SourceFormat) and f.name in FORMATS
        if f.needs is not None:
            assert f.needs[1] in extras, f.name


def test_an_unknown_format_names_the_registered_ones(client):

    with pytest.raises(InvalidInput, match=", ".join(sorted(FORMATS))):
        source_format("bag")
    with pytest.raises(InvalidInput, match="one of"):
        client.ingest("bag", ["x"], "lab", progress=False)


def test_a_url_reaches_only_a_format_that_reads_urls(client):

    for f in FORMATS.values():
        if not f.remote:
            with pytest.raises(InvalidInput, match="sources are local files"):
                client.ingest(f.name, ["s3://bucket/x"], "lab", progress=False, workers=1)


def test_no_module_keeps_a_list_of_formats_or_branches_on_one():
    """What the registry replaced: a format list in the CLI, if-chains in ingest's tasks and
    ``--list``. A new format would be missed there."""
    names = "|".join(FORMATS)
    patterns = [rf"""fmt\s*==\s*["']({names})["']""", rf"""\.fmt\s*[!=]=\s*["']({names})["']""",
                rf"""\[\s*["']({names})["'],\s*["']({names})["']"""]
    found = []
    for path in {*(ROOT / "converters").glob("*.py"), *(ROOT / "rayform").rglob("*.py")}:
        if path.name == "formats.py":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {p}" for p in patterns if re.search(p, text)]
    assert not found, found


def test_every_option_is_read_by_every_format_or_by_a_format_that_names_it():
    named = {o for f in FORMATS.values() for o in f.options}
    assert set(FIELDS) == set(COMMON) | set(TASK_PARTS) | named  # no option no format reads
    for f in FORMATS.values():
        assert not set(f.options) & (set(COMMON) | set(TASK_PARTS)), f.name


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_options_are_checked_once_each_naming_what_is_wrong(fmt, client):
    f = FORMATS[fmt]
    assert f.options_of(None) == SourceOptions()
    assert f.options_of({"task": "pick", "mapping": {"a": "b", "c": ""}}) == SourceOptions(task="pick",
                                                                                          mapping={"a": "b", "c": None})
    for given, message in [({"nope": 1}, "no option 'nope'"), ({"task": 3}, r"option 'task' \(--task\): a text"),
                           ({"allow_nonfinite": "yes"}, "true or false"), ({"mapping": {"a": 1}}, "a mapping of"),
                           ({"mapping": ["a"]}, "a mapping of"), ({"episodes": 5}, "two whole numbers"),
                           ({"shard": "train"}, "split, index")]:
        with pytest.raises(InvalidInput, match=message):
            f.options_of(given)
        with pytest.raises(InvalidInput, match=message):  # before any source is opened
            client.ingest(fmt, ["/nonexistent"], "lab", options=given, progress=False, workers=1)
    others = {o for g in FORMATS.values() for o in g.options} - set(f.options)
    values = {"fps": 10.0, "storage_options": {"anon": True}, "allow_missing": True, "decode_video": True,
              "stamp": "log", "joints": ["a"], "splits": ["train"], "task_key": "instruction"}
    for option in sorted(others):
        with pytest.raises(InvalidInput, match=rf"option '{option}' \(--.*\) is not {fmt}'s"):
            f.options_of({option: values[option]})
        assert f.options_of({option: None}) == SourceOptions()  # a flag left at its default is no error
    for option in f.options:
        assert getattr(f.options_of({option: values[option]}), option) not in (None, False, "header")


def test_a_mapped_name_no_source_has_is_an_error_naming_what_it_has(real_data, tmp_path):
    from rayform.converters.hdf5 import iter_hdf5  # noqa: F401 (h5py present)
    from rayform.converters.lerobot import LeRobotDataset
    from rayform.converters.stream_names import StreamNames

    names = StreamNames("src", lambda f: None if f == "skip" else f.upper(), {"a": "x", "skip": "kept"})
    assert names.table(["a", "b", "skip"]) == {"a": "x", "b": "B", "skip": "kept"}
    with pytest.raises(InvalidInput, match=r"src: no feature 'a' to map. It has: b"):
        names.table(["b"])
    with pytest.raises(InvalidInput, match="no feature 'observation.nope' to map"):
        LeRobotDataset(real_data / "lerobot_v30_so101_ros2_example", {"observation.nope": "x"})
    ds = LeRobotDataset(real_data / "lerobot_v30_so101_ros2_example", {"timestamp": "clock/value"})
    assert ds.mapping["timestamp"] == "clock/value" and ds.mapping["frame_index"] is None  # skipped by default
