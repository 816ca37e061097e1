"""The view's pages are ES modules served as they are (no build step): every file of
``view/static`` is served, every module another imports is one of them, and no script shares
globals by load order (each is a module: it imports what it uses)."""

from __future__ import annotations

import re
from importlib import resources

from rayform.view.server import STATIC

IMPORT = re.compile(r"""^import .* from "\./([\w.]+)";$""", re.M)


def _static() -> dict[str, str]:
    root = resources.files("rayform.view").joinpath("static")
    return {p.name: p.read_text() for p in root.iterdir() if p.is_file()}


def test_every_file_is_served_and_every_import_is_a_served_module():
    files = _static()
    assert set(STATIC) == set(files)
    scripts = {n for n in files if n.endswith(".js")}
    entry = re.findall(r'<script type="module" src="/static/([\w.]+)"></script>', files["index.html"])
    assert entry == ["routes.js"] and "<script src" not in files["index.html"]
    reached, todo = set(), list(entry)
    while todo:  # the module graph from the entry reaches every script
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        imported = IMPORT.findall(files[name])
        assert set(imported) <= scripts, (name, imported)
        todo += imported
    assert reached == scripts


def test_no_script_relies_on_another_s_globals():
    files = _static()
    exported = {n: set(re.findall(r"^export (?:async )?(?:function|const|class) (\w+)", t, re.M))
                for n, t in files.items() if n.endswith(".js")}
    for name, text in files.items():
        if not name.endswith(".js"):
            continue
        assert '"use strict"' not in text  # modules are strict; a classic script is not one
        names = {m for group in re.findall(r"^import \{([^}]*)\} from", text, re.M) for m in re.split(r"\s*,\s*", group.strip())}
        for other, symbols in exported.items():
            if other == name:
                continue
            for symbol in symbols:
                used = re.search(rf"(?<![\w.]){symbol}\(", text)
                assert not used or symbol in names or re.search(rf"import \* as \w+ from \"\./{other}\"", text) \
                    or re.search(rf"^(?:export )?(?:async )?function {symbol}\b", text, re.M), (name, symbol, other)


def test_one_plotting_module_draws_every_chart():
    files = _static()
    for name, text in files.items():
        if name.endswith(".js") and name != "plot.js":
            assert "getContext(" not in text or name == "episode.js" and text.count("getContext(") == 1, name
            assert "devicePixelRatio" not in text, name  # sizes for the screen: plot.sized
