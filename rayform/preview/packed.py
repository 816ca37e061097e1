"""What a pack holds for one segment: its sample instants and each array or pose stream's
action chunk at each of them, read from the pack's records (so a preview draws exactly what
training reads, alignment and padding included)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rayform.cache.store_view import CachedStore
from rayform.pack import Pack
from rayform.pack.layout import CLIPS, LOWDIM
from rayform.read.reader import PackReader
from rayform.sample.builder import SampleBuilder
from rayform.sample.spec import SampleSpec

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
        """Every sample of ``segment_id`` in ``pack``."""
        return cls.by_segment(store, pack, [segment_id])[segment_id]

    @classmethod
    def by_segment(cls, store: CachedStore, pack: Pack, segment_ids: Sequence[str]) -> dict[str, PackedSamples]:
        """Every sample of each of ``segment_ids`` in ``pack``, in one pass over the pack's
        records (not its images); a sample of another segment is left once its first record
        part is read."""
        streams = [n for n, s in pack.schema.items() if s.kind != "image"]
        horizon = max(1, pack.spec.max_horizon)
        builders = [(n, SampleBuilder(pack, SampleSpec.of(obs=[n], action=n, fps=pack.fps, horizon=horizon)))
                    for n in streams]
        reader = PackReader(store, pack, [CLIPS if pack.has_video else LOWDIM])  # the records
        found: dict[str, list[tuple[int, dict[str, np.ndarray], np.ndarray]]] = {s: [] for s in segment_ids}
        for start in range(0, len(reader) if builders else 0, BATCH):
            for key, raw in reader.raw_many(np.arange(start, min(start + BATCH, len(reader)))):
                first = builders[0][1].build(raw, key)
                wanted = found.get(first["meta"]["segment"])
                if wanted is None:
                    continue
                chunks = {builders[0][0]: first["action"], **{n: b.build(raw, key)["action"] for n, b in builders[1:]}}
                wanted.append((int(first["t_ns"]), chunks, first["action_is_pad"]))
        out = {}
        for segment_id, samples in found.items():
            samples.sort(key=lambda f: f[0])
            out[segment_id] = cls(
                fps=float(pack.fps),
                t_ns=np.array([f[0] for f in samples], np.int64),
                chunks={n: np.stack([f[1][n] for f in samples]) if samples else np.zeros((0, horizon))
                        for n in streams},
                is_pad=np.stack([f[2] for f in samples]) if samples else np.zeros((0, horizon), bool),
            )
        return out
