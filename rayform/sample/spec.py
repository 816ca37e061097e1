"""What a dataset asks of each sample: one frozen value, checked once, its fields in their final
types. Both datasets take it (``EpisodeDataset(slice_, spec)``), or the keywords it is made of
(``EpisodeDataset(slice_, obs=[...], action=..., fps=15)``: ``SampleSpec.of``).

==============  ================================================================================
field           meaning
==============  ================================================================================
``obs``         the streams each sample carries (images, arrays, poses)
``action``      the action chunk (``Action``: its parts, horizon, pose rotation), or None
``fps``         the rate of the pack samples come from
``frame``       the axes poses are re-expressed in (``"ros"``, ``"optical"``, ``"opengl"``; None:
                as recorded)
``history``     per stream, the grid steps back it carries (``rayform.sample.history``)
``resize``      the (H, W) every image is decoded at (None: as packed)
``normalize``   per sample key, a mode (``rayform.sample.normalize``)
``pack``        the pack to read, by key (None: the one that serves this spec best)
==============  ================================================================================
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rayform.errors import InvalidInput
from rayform.frames import check_frame
from rayform.pack.spec import MAX_HORIZON, check_fps
from rayform.sample.action import check_rotation, resolve
from rayform.sample.history import steps_back
from rayform.sample.normalize import MODES


@dataclass(frozen=True)
class Action:
    """The action chunk: ``parts`` (each an array stream, its ``<stream>_delta``, a pose stream or
    ``<pose>_delta``; several are concatenated on the last axis: ``rayform.sample.action``),
    ``horizon`` steps long, a pose part's rotation given as ``rotation`` (``"quat"``, ``"rot6d"``,
    ``"axis_angle"``; None: the recorded quaternion)."""

    parts: tuple[str, ...]
    horizon: int = 16
    rotation: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.parts, tuple) or not self.parts or not all(isinstance(a, str) and a for a in self.parts):
            raise InvalidInput(f"action {str(self.parts)[:80]}: a stream name, e.g. \"joints/position_delta\", "
                               "several to concatenate, or None")
        horizon = self.horizon
        if isinstance(horizon, bool) or not isinstance(horizon, int) or not 1 <= horizon <= MAX_HORIZON:
            raise InvalidInput(f"horizon {horizon!r}: a whole number of steps, 1..{MAX_HORIZON}")
        check_rotation(self.rotation)


@dataclass(frozen=True)
class SampleSpec:
    """What each sample holds (the table above); checked when made. ``SampleSpec.of`` makes one
    from the datasets' keywords."""

    obs: tuple[str, ...]
    action: Action | None = None
    fps: float = 15.0
    frame: str | None = None
    history: tuple[tuple[str, tuple[int, ...]], ...] = ()
    resize: tuple[int, int] | None = None
    normalize: tuple[tuple[str, str], ...] = ()
    pack: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.obs, tuple) or not self.obs or not all(isinstance(o, str) and o for o in self.obs):
            raise InvalidInput(f"obs {str(self.obs)[:80]}: name one stream or more, e.g. obs=[\"cam0/rgb\"]")
        if self.action is not None and not isinstance(self.action, Action):
            raise InvalidInput(f"action {str(self.action)[:80]}: an Action (SampleSpec.of takes stream names)")
        if not isinstance(self.fps, float) or check_fps(self.fps) != self.fps:
            raise InvalidInput(f"fps {self.fps!r}: a float in frames per second (SampleSpec.of takes any number)")
        check_frame(self.frame)
        for name, back in self.history:
            if name not in self.obs:
                raise InvalidInput(f"history of {name!r}: not in obs ({', '.join(self.obs)}); history is of observations")
            if not back or not all(isinstance(k, int) and 0 <= k <= MAX_HORIZON for k in back):
                raise InvalidInput(f"history of {name!r}: {back!r} is not a tuple of steps back")
        if self.resize is not None and check_resize(self.resize) != self.resize:
            raise InvalidInput(f"resize {self.resize!r}: a tuple (height, width)")
        for key, mode in self.normalize:
            if mode not in MODES:
                raise InvalidInput(f"normalize {key!r}: mode {str(mode)[:40]!r}, one of {', '.join(MODES)}")
        if self.pack is not None and not isinstance(self.pack, str):
            raise InvalidInput(f"pack {str(self.pack)[:60]}: a pack key such as 'fps15-129e34cc'")

    @classmethod
    def of(cls, obs: str | Sequence[str], action: str | Sequence[str] | None = None, fps: float = 15,
           horizon: int = 16, frame: str | None = None, **more: Any) -> SampleSpec:
        """The spec of the datasets' keywords: ``obs``, ``action``, ``fps``, ``horizon``, ``frame``,
        and ``rotation``, ``history`` (steps, or seconds) or LeRobot's ``delta_timestamps``,
        ``resize``, ``normalize``, ``pack`` (a key, or a ``Pack``)."""
        unknown = sorted(set(more) - {"rotation", "history", "delta_timestamps", "resize", "normalize", "pack"})
        if unknown:
            raise InvalidInput(f"{unknown[0]}=: not a sample parameter. They are obs, action, fps, horizon, frame, "
                               "rotation, history (or delta_timestamps), resize, normalize and pack")
        history, seconds = more.get("history"), more.get("delta_timestamps")
        if history is not None and seconds is not None:
            raise InvalidInput("history and delta_timestamps say the same thing: give one of them")
        names = (obs,) if isinstance(obs, str) else tuple(obs) if isinstance(obs, Sequence) else ()
        if isinstance(horizon, numbers.Integral) and not isinstance(horizon, bool):
            horizon = int(horizon)
        if isinstance(horizon, bool) or not isinstance(horizon, int) or not 1 <= horizon <= MAX_HORIZON:
            raise InvalidInput(f"horizon {horizon!r}: a whole number of steps, 1..{MAX_HORIZON}")
        rate = check_fps(fps)
        pack = more.get("pack")
        return cls(
            obs=names,
            action=None if action is None else Action(_names(action), horizon, more.get("rotation")),
            fps=rate,
            frame=frame,
            history=tuple(steps_back(history if history is not None else seconds, rate).items()),
            resize=check_resize(more.get("resize")),
            normalize=_modes(more.get("normalize")),
            pack=getattr(pack, "key", pack),  # a Pack names itself by its key
        )

    @classmethod
    def given(cls, spec: SampleSpec | None, keywords: Mapping[str, Any]) -> SampleSpec:
        """A dataset's spec: the one it was given, or the one its keywords make (not both)."""
        if spec is None:
            if "obs" not in keywords:
                raise InvalidInput("name what each sample holds: obs=[...] (and action=, fps=, ...), or a SampleSpec")
            return cls.of(**keywords)
        if not isinstance(spec, SampleSpec):
            raise InvalidInput(f"{str(spec)[:60]}: give a SampleSpec, or the sample's keywords (obs=[...], ...)")
        if keywords:
            raise InvalidInput(f"a SampleSpec and {', '.join(sorted(keywords))}= beside it: give them inside it")
        return spec

    @property
    def horizon(self) -> int:
        """The action's length in steps (0 without an action)."""
        return self.action.horizon if self.action is not None else 0

    @property
    def rotation(self) -> str | None:
        return self.action.rotation if self.action is not None else None

    def actions(self) -> tuple[str, ...]:
        """The parts of the action, as asked (none without one)."""
        return self.action.parts if self.action is not None else ()

    def steps_back(self) -> dict[str, tuple[int, ...]]:
        """Each stream's history as steps back, in output order (none: no history)."""
        return dict(self.history)

    def deepest_history(self) -> int:
        return max((max(k) for _, k in self.history), default=0)

    def streams(self, recorded: Collection[str] = ()) -> list[str]:
        """The packed streams these samples read, of those ``recorded`` (an action part named
        ``x_delta`` reads a recorded ``x_delta``, else ``x``: ``rayform.sample.action``)."""
        return list(dict.fromkeys([*self.obs, *(resolve(a, recorded)[0] for a in self.actions())]))


def _names(action: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(action, str):
        return (action,)
    if isinstance(action, Sequence) and action and all(isinstance(a, str) and a for a in action):
        return tuple(action)
    raise InvalidInput(f"action {str(action)[:80]}: a stream name, e.g. \"joints/position_delta\", several to "
                       "concatenate, or None")


def _modes(normalize: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    if normalize is None:
        return ()
    if not isinstance(normalize, Mapping):
        raise InvalidInput(f"normalize {str(normalize)[:60]!r}: a mapping of sample keys to modes, "
                           "e.g. {\"action\": \"min_max\"}")
    return tuple((str(k), v) for k, v in normalize.items())


def check_resize(size: Any) -> tuple[int, int] | None:
    if size is None:
        return None
    if isinstance(size, Sequence) and len(size) == 2 and all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) and 1 <= int(v) <= 16384 for v in size):
        return int(size[0]), int(size[1])
    raise InvalidInput(f"resize {str(size)[:40]}: (height, width) in pixels, e.g. (224, 224)")
