"""The docs cannot drift from the code: every module, function and file that the README,
docs/ and the package's own docstrings and comments name exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"cache", "codec", "converters", "diagnostics", "interop", "ops", "order", "pack", "packer", "preview",
            "read", "recordings", "sample", "store", "view"}
_NAMED = re.compile(r"``?([A-Za-z_][\w./-]*[\w)])``?")


def _texts() -> list[tuple[str, str]]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name != "changelog.md"]  # history names the past
    out = [(str(p.relative_to(ROOT)), p.read_text()) for p in [ROOT / "README.md", *docs]]
    # the package's own (its converters are a link to converters/: read once, there)
    out += [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "rayform").rglob("*.py"))
            if (ROOT / "rayform" / "converters") not in p.parents]
    out += [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted((ROOT / "converters").glob("*.py"))]
    return out


def _resolves(dotted: str) -> bool:
    """``rayform.a.b.c`` (or ``a.b.c`` below rayform): a module, then attributes of it."""
    parts = dotted.removesuffix("()").split(".")
    if parts[0] == "rayform":
        parts = parts[1:]
    for cut in range(len(parts), -1, -1):
        try:
            found = importlib.import_module(".".join(["rayform", *parts[:cut]]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def _file(path: str, where: str) -> bool:
    bases = [ROOT, ROOT / "rayform", Path(where).parent if not where.endswith(".md") else ROOT]
    return any((base / path).exists() for base in bases) or any((ROOT / "rayform").rglob(path))


def test_every_module_function_and_file_named_exists():
    missing = []
    for where, text in _texts():
        for token in sorted(set(_NAMED.findall(text))):
            if token.endswith(".py") and "/" in token and not token.startswith(("../", "/")) \
                    or token.endswith((".js", ".css", ".html")):
                found = _file(token, where)
            elif "." in token and "/" not in token and (token.startswith("rayform.") or token.split(".")[0] in PACKAGES) \
                    and not token.endswith((".py", ".md", ".json", ".toml", ".mp4", ".png")):
                found = _resolves(token)
            else:
                continue  # not a name of this project's
            if not found:
                missing.append((where, token))
    assert not missing, "\n".join(f"{w}: {t}" for w, t in missing)
