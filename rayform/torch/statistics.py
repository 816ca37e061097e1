"""What both datasets share about statistics: ``dataset.stats``, ``normalize=`` and
``dataset.unnormalize`` (the rule: ``rayform.sample.normalize``; the numbers:
``rayform.pack.stats``)."""

from __future__ import annotations

from typing import Any

from rayform.errors import InvalidInput
from rayform.pack.stats import StreamStats, concatenate, merge
from rayform.sample.builder import SampleBuilder
from rayform.sample.normalize import Normalizer


def pack_stats(builders: list[SampleBuilder]) -> dict[str, StreamStats]:
    """The statistics of the parts' packs together (one pack: its own)."""
    for b in builders:
        if b.pack.stats is None:
            raise InvalidInput(f"{b.pack.slice_id}: its pack at {b.pack.fps:g} fps was made before packs kept "
                               f"statistics. Run: rayform pack {b.pack.slice_id} --fps {b.pack.fps:g} --force")
    per = [b.pack.stats or {} for b in builders]
    names = [n for n in per[0] if all(n in s for s in per)]
    return {n: merge([s[n] for s in per]) for n in names}


class Statistics:
    """Mixed into both datasets: ``builders`` are their parts' sample builders, whose spec says
    what to normalize."""

    builders: list[SampleBuilder]
    normalizer: Normalizer | None = None

    def _normalize(self) -> None:
        b = self.builders[0]
        normalize = dict(b.spec.normalize)
        if not normalize:
            return
        stats = pack_stats(self.builders)
        sources = {s.name: s.name for s in b.arrays}
        if b.actions:
            sources["action"] = "action"
            if "action" in normalize:  # each part's statistics (a stream's, or its delta's), side by side
                lacking = [p.asked for p in b.actions if p.stats_key not in stats or (p.stream.kind == "pose" and
                                                                                  b.spec.rotation is not None)]
                if lacking:
                    raise InvalidInput(f"normalize 'action': the pack keeps no statistics of {lacking[0]} "
                                       f"{'as ' + b.spec.rotation if b.spec.rotation else '(a relative transform)'}"
                                       "; normalize the other keys, or leave the action as it is")
                parts = [stats[p.stats_key] for p in b.actions]
                stats = {**stats, "action": parts[0] if len(parts) == 1 else concatenate(parts)}
        self.normalizer = Normalizer(normalize, stats, sources)
        for builder in self.builders:
            builder.normalizer = self.normalizer

    @property
    def stats(self) -> dict[str, dict[str, Any]]:
        """Per array stream (and ``<stream>:delta``, its derived delta): ``count``, ``mean``, ``std``, ``min``,
        ``max``, ``q01``, ``q99`` as numpy arrays of the stream's element shape; of a mixture,
        the merge of its parts."""
        return {name: s.as_dict() for name, s in pack_stats(self.builders).items()}

    def unnormalize(self, values: Any, key: str = "action") -> Any:
        """``values`` (e.g. a policy's predicted action chunk, numpy or torch) back in the
        stream's units: the inverse of ``normalize`` for ``key``."""
        if self.normalizer is None:
            raise InvalidInput("unnormalize: this dataset normalizes nothing (give it normalize={...})")
        return self.normalizer.invert(key, values)
