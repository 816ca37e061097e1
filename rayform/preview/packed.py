"""What a pack holds for one segment: its sample instants and each array or pose stream's
action chunk at each of them, read from the pack's records (so a preview draws exactly what
training reads, alignment and padding included)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rayform.pack import Pack
from rayform.pack.layout import LOWDIM
from rayform.read.reader import PackReader
from rayform.read.sample import SampleBuilder, SampleSpec
from rayform.store.cached import CachedStore

BATCH = 512  # index rows read at a time


@dataclass
class PackedSamples:
    """A pack's samples of one segment, in time order."""

    fps: float
    t_ns: np.ndarray  # (N,) the sample instants
    chunks: dict[str, np.ndarray]  # stream -> (N, horizon, *shape) the next values, step 1 .. horizon
    is_pad: np.ndarray  # (N, horizon) steps past the segment's end (repeats of its last value)

    @property
    def horizon(self) -> int:
        return int(self.is_pad.shape[1])

    @classmethod
    def of(cls, store: CachedStore, pack: Pack, segment_id: str) -> PackedSamples:
        """Every sample of ``segment_id`` in ``pack`` (the index is read whole; only the
        records, not the images, of the segment's samples are built)."""
        streams = [n for n, s in pack.schema.items() if s.kind != "image"]
        horizon = max(1, pack.spec.max_horizon)
        builders = {n: SampleBuilder(pack, SampleSpec(obs=[n], action=n, fps=pack.fps, horizon=horizon))
                    for n in streams}
        reader = PackReader(store, pack, [LOWDIM])
        found: list[tuple[int, dict[str, np.ndarray], np.ndarray]] = []
        for start in range(0, len(reader), BATCH):
            for key, raw in reader.raw_many(np.arange(start, min(start + BATCH, len(reader)))):
                built = {n: b.build(raw, key) for n, b in builders.items()}
                first = next(iter(built.values()), None)
                if first is None or first["meta"]["segment"] != segment_id:
                    continue
                found.append((int(first["t_ns"]), {n: s["action"] for n, s in built.items()}, first["action_is_pad"]))
        found.sort(key=lambda f: f[0])
        return cls(
            fps=float(pack.fps),
            t_ns=np.array([f[0] for f in found], np.int64),
            chunks={n: np.stack([f[1][n] for f in found]) if found else np.zeros((0, horizon)) for n in streams},
            is_pad=np.stack([f[2] for f in found]) if found else np.zeros((0, horizon), bool),
        )
