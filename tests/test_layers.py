"""The packages are layers: every import runs down (or within a package), and no modules import
each other in a circle. Read from the source with ``ast``, imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import from its own layer's package and from lower layers only;
# modules of one layer that are not one package (order and sample; packer and read; torch,
# client and diagnostics) do not import each other: reading never imports writing.
LAYERS: list[list[str]] = [
    ["rayform.errors"],
    ["rayform.sizes", "rayform.interrupts"],
    ["rayform.config", "rayform.names", "rayform.untrusted", "rayform.frames", "rayform.permutation", "rayform.jobs"],
    ["rayform.codec"],
    ["rayform.store"],
    ["rayform.cache"],
    ["rayform.recordings"],
    ["rayform.pack"],
    ["rayform.order", "rayform.sample"],
    ["rayform.packer", "rayform.read"],
    ["rayform.client", "rayform.torch", "rayform.diagnostics", "rayform.interop"],
    ["rayform.ops", "rayform.preview", "rayform.converters", "rayform.view"],
    ["rayform.cli", "rayform"],  # `rayform` itself: the package's face, rayform/__init__.py
]
# Allowed upward on purpose: packing on demand (the datasets pack a missing pack; the client
# packs) and ingesting (the client's ingest), each a function-local import, so reading a pack
# never loads the packer or a converter.
ALLOWED = {("rayform.torch", "rayform.packer"), ("rayform.client", "rayform.packer"),
           ("rayform.client", "rayform.converters")}


def _modules() -> dict[str, Path]:
    out = {}
    for base, package in ((ROOT / "rayform", "rayform"), (ROOT / "converters", "rayform.converters")):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    found = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from rayform.read import order` imports the module; `from rayform.pack import Pack`, the package
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:  # `from rayform.read import order` names a module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def _layer(module: str) -> tuple[int, str]:
    best = None
    for n, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (n, prefix)
    assert best is not None, f"{module}: on no layer; add it to LAYERS"
    return best


MODULES = _modules()
GRAPH = {m: _imports(m, p, set(MODULES)) for m, p in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_down_the_layers(module):
    level, group = _layer(module)
    for target in GRAPH[module]:
        if target == "rayform":
            continue  # `import rayform` inside a function of a higher layer reads the face, checked below
        t_level, t_group = _layer(target)
        if (group, t_group) in ALLOWED or t_group == group:
            continue
        assert t_level < level, f"{module} imports {target}: {group} (layer {level}) may not import {t_group} (layer {t_level})"


def test_only_the_top_imports_the_package_face():
    for module, targets in GRAPH.items():
        if "rayform" in targets:
            assert _layer(module)[0] >= len(LAYERS) - 2, f"{module} imports rayform/__init__.py from below"


def test_no_modules_import_each_other():
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for t in sorted(GRAPH[m]):
            if t == "rayform" or t not in GRAPH:
                continue
            if state.get(t) == 1:
                pytest.fail("import circle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_layer_test_sees_a_violation(tmp_path):
    """The check itself can fail: an upward import in a module is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from rayform.torch import EpisodeDataset\n")
    assert "rayform.torch" in _imports("rayform.read.bad", bad, set(MODULES))
    assert _layer("rayform.read.bad")[0] < _layer("rayform.torch")[0]


def test_no_function_takes_more_than_eight_parameters():
    """A function past eight parameters wants a dataclass (``jobs.Run``, ``SourceOptions``,
    ``FetchRequest``, ``PackBlobs``): a call of nine positional or keyword values is read wrong."""

    root = Path(__file__).resolve().parents[1]
    wide = []
    for path in [*(root / "rayform").rglob("*.py"), *(root / "converters").glob("*.py")]:
        if path.parent.name == "converters" and path.parent.parent.name == "rayform":
            continue  # the symlink to converters/
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                if len(names) > 8:
                    wide.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({len(names)})")
    assert not wide, wide
