"""``rayform verify --decode``: every video a slice and its packs hold, decoded, to find the
damage hashes cannot: a recording damaged before it was stored hashes to its own name, and
its packets (kept as recorded, ``--codec keep``) carry the damage into every pack.

Each segment's video streams are decoded packet by packet (nothing converted), and each
video pack's clips whole, with the decoder checking all it can (``codec.video.STRICT``); a
damaged one is a ``Problem`` naming the segment or sample, the stream and the frame.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from tqdm.auto import tqdm

from rayform.codec import records
from rayform.codec.clip import read_clip
from rayform.codec.video import PyAVDecoder
from rayform.errors import Malformed
from rayform.ops.verify import Problem, Report
from rayform.pack import Pack
from rayform.pack.layout import CLIPS
from rayform.read.reader import PackReader
from rayform.recordings.slices import Slice


def decode_check(slice_: Slice, packs: Iterable[Pack], progress: bool = False) -> Report:
    """Decode every video of ``slice_``'s segments and of ``packs``; ``Report.blobs`` counts the
    streams and clips decoded."""
    report = Report()
    seen: set[tuple[str, str]] = set()
    for i, s in enumerate(tqdm(slice_.segments, desc="decode", unit="segment", disable=not progress, leave=False)):
        if (s.id, s.version) in seen:
            continue
        seen.add((s.id, s.version))
        seg = slice_.segment(i)
        for name, info in seg.streams.items():
            if info.video is None:
                continue
            report.blobs += 1
            try:
                seg.video(name).check()
            except Malformed as e:
                report.problems.append(Problem(info.data[0][0], f"segment {s.id} stream {name}", str(e)))
    for pack in packs:
        if pack.has_video:
            _check_pack(slice_, pack, report)
    return report


def _check_pack(slice_: Slice, pack: Pack, report: Report) -> None:
    reader = PackReader(slice_.store, pack, [CLIPS])
    decoder = PyAVDecoder()
    for i, (key, raw) in enumerate(reader.raw_many(np.arange(pack.samples))):
        shard, _, place = raw["__clip__"]
        if place != 0:  # a clip is read once, at its first sample
            continue
        try:
            doc = records.loads(bytes(raw[CLIPS]), f"{key} {CLIPS}")
            videos = doc.get("video", {}) if isinstance(doc, dict) else {}
            for name, s in pack.schema.items():
                if s.video is None:
                    continue
                report.blobs += 1
                doc_clip = videos.get(name)
                if not isinstance(doc_clip, dict):
                    raise Malformed(f"{key}: its clips hold no {name}")
                clip = read_clip(doc_clip, f"{key}, {name} clip", s.video.codec, (s.shape[0], s.shape[1]))
                decoder.decode(clip, range(clip.frames), None, f"pack {pack.key} sample {i}, {name}")
        except Malformed as e:
            report.problems.append(Problem(pack.shards[shard].sha256, f"pack {pack.key} shard {shard}", str(e)))
    for shard in range(len(pack.shards)):
        reader.release(shard)
