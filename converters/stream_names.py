"""Each source feature's stream name, in one place for every format: the format's default name,
then the user's (``--map FEATURE=NAME``, ``options["mapping"]``; an empty name, ``None``, skips
the feature). A user's name for a feature the source does not have is an error naming what it
has, never silently ignored."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from rayform.errors import InvalidInput


class StreamNames:
    """``where``: the source, for errors; ``default``: the format's name for a feature (``None``:
    skipped unless the user names it); ``what``: what the format calls a feature (a topic, …)."""

    def __init__(self, where: str, default: Callable[[str], str | None],
                 user: Mapping[str, str | None] | None = None, what: str = "feature"):
        self.where, self.default, self.what = where, default, what
        self.user = dict(user or {})
        self.seen: set[str] = set()

    def of(self, feature: str) -> str | None:
        """The stream ``feature`` becomes (``None``: skipped)."""
        self.seen.add(feature)
        return self.user[feature] if feature in self.user else self.default(feature)

    def check(self, features: Iterable[str] | None = None) -> None:
        """Every feature the user named is one of ``features`` (default: those asked for so far)."""
        have = set(self.seen if features is None else features)
        unknown = [f for f in self.user if f not in have]
        if unknown:
            raise InvalidInput(f"{self.where}: no {self.what} {unknown[0]!r} to map. It has: "
                               f"{', '.join(sorted(have)) or 'none'}")

    def table(self, features: Iterable[str]) -> dict[str, str | None]:
        """Every feature's stream name, the user's checked against ``features`` first."""
        features = list(features)
        self.check(features)
        return {f: self.of(f) for f in features}
