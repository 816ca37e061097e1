"""What the slice and pack pages show: a slice's segments and packs; a pack's spec, codec,
bytes a frame, statistics (per element: its percentiles, mean and spread) and which pack a
dataset reads by default; and its samples as a dataset builds them (``sample.builder``, the
one place both datasets build from): images, the state now, and each array stream's chunk
of the next ``horizon`` steps with its pad mask, beside what the segment recorded over the
same time (a chunk off its recording is an alignment fault, seen at once).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from rayform.cache.store_view import CachedStore
from rayform.codec import imagecodec
from rayform.errors import InvalidInput, NotFound
from rayform.pack import Pack, Packs, grid
from rayform.pack.packs import packs_described
from rayform.pack.stats import PERCENTILES
from rayform.read.reader import PackReader
from rayform.recordings.segments import Segments
from rayform.recordings.slices import Slice, Slices
from rayform.sample.builder import SampleBuilder
from rayform.sample.spec import SampleSpec
from rayform.view.episode import finite_list, span_of

SEGMENTS_SHOWN = 1000  # a slice page's segments (the count says how many more)


class PackPages:
    def __init__(self, store: CachedStore, segments: Segments):
        self.store = store
        self.segments = segments
        self.slices = Slices(store)
        self.packs = Packs(store)
        self._lock = threading.Lock()
        self._building = threading.Lock()  # a builder's decoders and a reader's maps serve one sample at a time
        self._samples: OrderedDict[tuple[str, int], dict[str, Any]] = OrderedDict()
        self._builders: dict[str, tuple[PackReader, SampleBuilder, list[tuple[str, SampleBuilder]]]] = {}

    def slice_list(self) -> list[dict[str, Any]]:
        out = []
        for s in self.slices.list():
            out.append({"id": s.id, "name": s.name, "segments": len(s.segments), "sites": s.sites})
        return out

    def slice_page(self, slice_id: str) -> dict[str, Any]:
        s = self.slices.get(slice_id)
        shown = [{"id": seg.id, "version": seg.version, "site": seg.site}
                 for seg in s.segments[:SEGMENTS_SHOWN]]
        return {"id": s.id, "name": s.name, "digest": s.digest, "sites": s.sites, "segments_total": len(s.segments),
                "segments": shown, "packs": [self._pack_entry(p, made, default, differs)
                                             for p, made, default, differs in packs_described(self.packs, s)]}

    def pack_page(self, slice_id: str, key: str) -> dict[str, Any]:
        s = self.slices.get(slice_id)
        found = [d for d in packs_described(self.packs, s) if d[0].key == key]
        if not found:
            raise NotFound(f"slice {s.id} has no pack {key}; `rayform show {s.id}` lists its packs")
        p, made, default, differs = found[0]
        entry = self._pack_entry(p, made, default, differs)
        entry["slice"] = {"id": s.id, "name": s.name}
        entry["schema"] = {n: sc.to_manifest() for n, sc in p.schema.items()}
        entry["stats"] = {n: _stats(st) for n, st in (p.stats or {}).items()}
        entry["percentiles"] = PERCENTILES.tolist()
        return entry

    def sample(self, slice_id: str, key: str, index: int) -> dict[str, Any]:
        """Sample ``index`` of the pack as a dataset builds it, as JSON (its images as URLs)."""
        built = self._built(slice_id, key, index)
        return {k: v for k, v in built.items() if k != "images"} | {"images": sorted(built["images"])}

    def sample_image(self, slice_id: str, key: str, index: int, stream: str) -> bytes:
        built = self._built(slice_id, key, index)
        image: bytes | None = built["images"].get(stream)
        if image is None:
            raise NotFound(f"pack {key} sample {index} has no image {stream}")
        return image

    def _pack(self, slice_id: str, key: str) -> tuple[Slice, Pack]:
        s = self.slices.get(slice_id)
        return s, self.packs.named(s, key)

    def _built(self, slice_id: str, key: str, index: int) -> dict[str, Any]:
        s, p = self._pack(slice_id, key)
        if not 0 <= index < p.samples:
            raise InvalidInput(f"pack {key} has samples 0..{p.samples - 1}, not {index}")
        with self._lock:
            found = self._samples.get((p.digest, index))
            if found is not None:
                return found
        with self._building:
            return self._build(s, p, key, index)

    def _build(self, s: Slice, p: Pack, key: str, index: int) -> dict[str, Any]:
        reader, builder, chunks = self._builders_of(p)
        raw_key, raw = reader.raw(index)
        sample = builder.build(raw, raw_key)
        images = {n: imagecodec.encode_jpeg(np.ascontiguousarray(sample[n].transpose(1, 2, 0)), 92)
                  for n, sc in p.schema.items() if sc.kind == "image"}
        meta = sample["meta"]
        t = int(sample["t_ns"])
        seg = self.segments.get(meta["segment"], meta["segment_version"])
        start, _ = span_of(seg)
        arrays = {}
        for name, b in chunks:
            built = b.build(raw, raw_key)
            step = int(meta["frame_index"])
            when = p.spec.future_instants(grid.origin(t, step, p.spec.fps), np.array([step]))[0]
            ts = seg.timestamps(name)
            values = seg.values(name).reshape(len(ts), -1)
            # the recording over the chunk's span and a little beyond, at its own stamps
            near = (ts >= when[0] - 1e9 / p.fps) & (ts <= when[-1] + 1e9 / p.fps)
            arrays[name] = {
                "now": finite_list(np.asarray(sample[name]).reshape(-1)),
                "chunk": [finite_list(row) for row in np.asarray(built["action"]).reshape(len(built["action"]), -1)],
                "is_pad": np.asarray(built["action_is_pad"]).tolist(),
                "chunk_t": ((when[1:] - start) / 1e9).tolist(),
                "recorded_t": ((ts[near] - start) / 1e9).tolist(),
                "recorded": [finite_list(row) for row in values[near].astype(np.float64)],
                "labels": list(p.schema[name].names or ()) or [str(i) for i in range(values.shape[1])],
            }
        out = {"index": index, "t_s": (t - start) / 1e9, "meta": meta, "arrays": arrays, "images": images,
               "pack": key, "slice": s.id}
        with self._lock:
            self._samples[(p.digest, index)] = out
            while len(self._samples) > 32:
                self._samples.popitem(last=False)
        return out

    def _builders_of(self, p: Pack) -> tuple[PackReader, SampleBuilder, list[tuple[str, SampleBuilder]]]:
        with self._lock:
            found = self._builders.get(p.digest)
        if found is not None:
            return found
        streams = [n for n, sc in p.schema.items() if sc.kind != "image"]
        horizon = max(1, p.spec.max_horizon)
        whole = SampleBuilder(p, SampleSpec.of(obs=list(p.schema), fps=p.fps, horizon=horizon))
        chunks = [(n, SampleBuilder(p, SampleSpec.of(obs=[n], action=n, fps=p.fps, horizon=horizon)))
                  for n in streams]
        reader = PackReader(self.store, p, list(p.members))
        found = (reader, whole, chunks)
        with self._lock:
            self._builders[p.digest] = found
        return found

    @staticmethod
    def _pack_entry(p: Pack, made: str, default: bool, differs: list[str]) -> dict[str, Any]:
        size = sum(sh.bytes for sh in p.shards)
        cameras = [n for n, sc in p.schema.items() if sc.kind == "image"]
        return {"key": p.key, "fps": p.fps, "samples": p.samples, "shards": len(p.shards), "bytes": size,
                "bytes_a_frame": size / max(1, p.samples * max(1, len(cameras))) if cameras else None,
                "cameras": cameras, "horizon": p.spec.max_horizon, "history": p.spec.max_history,
                "codec": p.spec.image_codec, "resize": list(p.spec.resize) if p.spec.resize else None,
                "made": made or None, "default": default, "apart": differs,
                "video": {n: sc.video.to_manifest() for n, sc in p.schema.items() if sc.video is not None}}


def _stats(st: Any) -> dict[str, Any]:
    return {"count": st.count, "shape": list(st.mean.shape), "mean": finite_list(st.mean.ravel()),
            "std": finite_list(st.std.ravel()), "min": finite_list(st.min.ravel()), "max": finite_list(st.max.ravel()),
            "percentiles": [finite_list(row) for row in st.percentiles.reshape(len(PERCENTILES), -1)],
            "nonfinite": st.nonfinite}

