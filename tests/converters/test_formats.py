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
    from rayform.converters.ingest import ingest

    with pytest.raises(InvalidInput, match=", ".join(sorted(FORMATS))):
        source_format("bag")
    with pytest.raises(InvalidInput, match="one of"):
        ingest(client, "bag", ["x"], "lab", progress=False)


def test_a_url_reaches_only_a_format_that_reads_urls(client):
    from rayform.converters.ingest import ingest

    for f in FORMATS.values():
        if not f.remote:
            with pytest.raises(InvalidInput, match="sources are local files"):
                ingest(client, f.name, ["s3://bucket/x"], "lab", progress=False, workers=1)


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
