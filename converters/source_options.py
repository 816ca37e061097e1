"""What an ingest takes besides its sources, typed: ``SourceOptions``. Every format reads the
common ones; each reads the few of its own its registry row names (``SourceFormat.options``).
``rayform ingest``'s flags and ``Client.ingest(options={...})`` both become one, checked once:
an unknown option, a value of the wrong type, or another format's option set (to anything but
its default) is one InvalidInput naming it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rayform.errors import InvalidInput

COMMON = ("mapping", "task", "allow_nonfinite", "limits")
TASK_PARTS = ("episodes", "shard", "docs")  # set by a format's tasks, never by a user
FLAGS = {"mapping": "--map", "storage_options": "--source-option", "splits": "--split", "limits": "--limits"}  # else --<name>


@dataclass(frozen=True)
class SourceOptions:
    # -- every format
    mapping: Mapping[str, str | None] = field(default_factory=dict)  # feature -> stream name (None: skip it)
    task: str | None = None  # the task or instruction of every episode, over what the source says
    allow_nonfinite: bool = False  # store NaN/inf array values instead of refusing the episode
    limits: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)  # stream -> (low, high) its values keep to
    # -- a format's own (``SourceFormat.options``)
    fps: float | None = None  # the recording's rate where the source does not say it (hdf5, rlds)
    storage_options: dict[str, Any] | None = None  # fsspec's, for a source at a URL (lerobot, rlds)
    allow_missing: bool = False  # skip episodes whose files are absent (lerobot)
    decode_video: bool = False  # decode recorded video into JPEG frames instead of keeping it (lerobot)
    stamp: str = "header"  # "header" or "log": the time a message is at (ros)
    joints: tuple[str, ...] | None = None  # the joint order of every JointState (ros)
    splits: tuple[str, ...] | None = None  # the splits to convert (rlds; default: every split)
    task_key: str | None = None  # the text step feature that is the task (rlds)
    # -- a task's part of its source (``TASK_PARTS``)
    episodes: tuple[int, int] | None = None  # [first, end) of a LeRobot dataset's episodes
    shard: tuple[str, int] | None = None  # (split, index) of an RLDS shard
    docs: Any = None  # the RLDS schema, read once and handed to every task

    @classmethod
    def of(cls, fmt: str, accepted: tuple[str, ...], given: SourceOptions | Mapping[str, Any] | None) -> SourceOptions:
        """``given`` as the options of an ingest of ``fmt`` (which reads ``accepted`` besides
        the common ones), each checked."""
        if isinstance(given, SourceOptions):
            given = {f.name: getattr(given, f.name) for f in dataclasses.fields(given)}
        values: dict[str, Any] = {}
        defaults = cls()
        for name, value in (given or {}).items():
            if name not in FIELDS:
                raise InvalidInput(f"ingest {fmt}: no option {str(name)[:40]!r}; options: "
                                   f"{', '.join(n for n in FIELDS if n not in TASK_PARTS)}")
            value = _checked(fmt, name, value)
            if name not in COMMON + TASK_PARTS and name not in accepted:
                if value != getattr(defaults, name):
                    raise InvalidInput(f"ingest {fmt}: {_named(name)} is not {fmt}'s (it takes "
                                       f"{', '.join(COMMON + accepted)})")
                continue
            values[name] = value
        return cls(**values)

    def with_part(self, **part: Any) -> SourceOptions:
        """These options for one task: ``episodes``, ``shard`` or ``docs`` set."""
        assert set(part) <= set(TASK_PARTS), part
        return dataclasses.replace(self, **part)


FIELDS = tuple(f.name for f in dataclasses.fields(SourceOptions))


def _named(name: str) -> str:
    """An option as the API and the CLI call it."""
    return f"option {name!r} ({FLAGS.get(name, '--' + name.replace('_', '-'))})"


def _checked(fmt: str, name: str, value: Any) -> Any:
    what = f"ingest {fmt}: {_named(name)}"
    if value is None:  # left unsaid (a flag not given): the option's default
        return getattr(SourceOptions(), name)
    if name in ("allow_nonfinite", "allow_missing", "decode_video"):
        if not isinstance(value, bool):
            raise InvalidInput(f"{what}: true or false, not {str(value)[:40]!r}")
        return value
    if name == "mapping":
        if not isinstance(value, Mapping) or not all(isinstance(k, str) and (v is None or isinstance(v, str))
                                                      for k, v in value.items()):
            raise InvalidInput(f"{what}: a mapping of feature names to stream names (or null to skip one)")
        return {k: v or None for k, v in value.items()}
    if name in ("task", "task_key", "stamp"):
        if not isinstance(value, str):
            raise InvalidInput(f"{what}: a text, not {str(value)[:40]!r}")
        if name == "stamp" and value not in ("header", "log"):
            raise InvalidInput(f"{what}: 'header' or 'log', not {value[:40]!r}")
        return value
    if name == "limits":
        if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, (list, tuple)) and len(v) == 2 for k, v in value.items()):
            raise InvalidInput(f"{what}: a mapping of stream names to (low, high), e.g. "
                               "{'joints/position': (-3.14, 3.14)}")
        return {k: tuple(v) for k, v in value.items()}
    if name == "fps":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidInput(f"{what}: a positive number, not {str(value)[:40]!r}")
        return float(value)
    if name in ("joints", "splits"):
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise InvalidInput(f"{what}: a list of names, not {str(value)[:40]!r}")
        return tuple(value) or None
    if name == "storage_options":
        if not isinstance(value, Mapping):
            raise InvalidInput(f"{what}: a mapping (fsspec's storage options)")
        return dict(value)
    if name == "episodes":
        if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(
                type(v) is int and v >= 0 for v in value) or value[0] > value[1]:
            raise InvalidInput(f"{what}: [first, end) of the episodes, two whole numbers")
        return tuple(value)
    if name == "shard":
        if not isinstance(value, (list, tuple)) or len(value) != 2 or not isinstance(value[0], str) \
                or type(value[1]) is not int:
            raise InvalidInput(f"{what}: (split, index) of an RLDS shard")
        return tuple(value)
    return value  # docs: the schema a task was handed, as its format read it
