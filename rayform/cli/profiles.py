"""The command's settings from a config file, with profiles.

``$RAYFORM_CONFIG``, else ``$XDG_CONFIG_HOME/rayform/config.toml`` (``~/.config/…``)::

    [default]
    store = "s3://bucket/rayform"
    options = { endpoint_url = "http://minio:9000" }

    [profiles.lab]
    store = "s3://lab/rayform"
    cache = "/fast/disk/rayform-cache"
    options = { endpoint_url = "http://lab-minio:9000", anon = false }

``--profile lab`` (or ``RAYFORM_PROFILE=lab``) lays the profile over ``[default]``. What a
run is given wins over the file: ``--store``, ``--cache`` and ``-o`` on the command line,
then ``RAYFORM_STORE`` and ``RAYFORM_CACHE_DIR``, then the profile, then ``[default]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rayform.errors import InvalidInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found, no-redef, unused-ignore]

KEYS = {"store": str, "cache": str, "options": dict}


def config_path(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("RAYFORM_CONFIG"):
        return Path(os.path.expanduser(env["RAYFORM_CONFIG"]))
    base = env.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "rayform" / "config.toml"


def settings(profile: str | None, env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The ``[default]`` settings with ``profile``'s laid over them (nothing without a file)."""
    path = config_path(env)
    if not path.is_file():
        if env.get("RAYFORM_CONFIG"):  # named on purpose: a typo must not pass as "no settings"
            raise InvalidInput(f"RAYFORM_CONFIG={env['RAYFORM_CONFIG'][:200]}: no such file. Point it at your "
                               "config.toml, or unset it to use ~/.config/rayform/config.toml")
        if profile:
            raise InvalidInput(f"profile {profile!r}: there is no config file {path} to hold it. "
                               "Write one (see rayform --help), or point RAYFORM_CONFIG at it")
        return {}
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise InvalidInput(f"{path}: not a readable TOML file ({e})") from None
    unknown = set(doc) - {"default", "profiles"}
    if unknown:
        raise InvalidInput(f"{path}: unknown table {sorted(unknown)[0]!r}; it holds [default] and [profiles.NAME]")
    out = _section(doc.get("default", {}), f"{path} [default]")
    if profile:
        profiles = doc.get("profiles", {})
        if not isinstance(profiles, dict) or profile not in profiles:
            names = ", ".join(sorted(profiles)) if isinstance(profiles, dict) and profiles else "none"
            raise InvalidInput(f"profile {profile!r}: not in {path} (its profiles: {names})")
        chosen = _section(profiles[profile], f"{path} [profiles.{profile}]")
        out = {**out, **chosen, "options": {**out.get("options", {}), **chosen.get("options", {})}}
    return out


def _section(section: Any, what: str) -> dict[str, Any]:
    if not isinstance(section, dict):
        raise InvalidInput(f"{what}: not a table")
    for key, value in section.items():
        if key not in KEYS:
            raise InvalidInput(f"{what}: unknown key {key!r}; it may set {', '.join(KEYS)}")
        if not isinstance(value, KEYS[key]):
            raise InvalidInput(f"{what}: {key} must be a {KEYS[key].__name__}")
    return dict(section)


def apply(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> None:
    """Fill what the command line left unset from the config file."""
    s = settings(args.profile or env.get("RAYFORM_PROFILE") or None, env)
    if args.store is None and not env.get("RAYFORM_STORE") and s.get("store"):
        args.store = s["store"]
    if args.cache is None and not env.get("RAYFORM_CACHE_DIR") and s.get("cache"):
        args.cache = os.path.expanduser(s["cache"])
    # the file's options first: an -o given on the command line overrides one of the same key
    args.option = [f"{k}={json.dumps(v)}" for k, v in s.get("options", {}).items()] + list(args.option)
