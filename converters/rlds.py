"""RLDS datasets in TFDS's folder layout (Open X-Embodiment, DROID, BridgeData V2, RT-1) into
segments, read without TensorFlow.

A dataset folder ``<name>/<version>/`` holds ``dataset_info.json`` (splits, their shards and
episode counts), ``features.json`` (the schema) and ``<name>-<split>.<format>-NNNNN-of-MMMMM``
shards of one ``tf.train.Example`` per episode: ``tfrecord`` (framing and checksums, protobuf)
or ``array_record`` (read with the array-record package's reader, ``array_records``).
The episode's ``steps`` are flattened in the Example: a tensor feature of shape ``S`` is one list
of ``steps × prod(S)`` values (``bytes``/``zlib`` encoded: one entry a step), an image or a text
one entry a step.

One segment per episode, named ``<dataset>/<split>/episode_NNNNNN``: its place in the split as
``tfds.builder_from_directory(...).as_dataset(split, shuffle_files=False)`` yields it
(``rlds_order``: TFDS interleaves shards 16 records at a time), and ``shard``/``record`` in its
metadata. Encoded images are kept as recorded (``ImageStream``: the JPEG/PNG bytes, not decoded;
the format sniffed from the bytes where features.json does not state it), tensors
become array streams named after their feature paths below ``steps`` (``observation/state``;
``action`` becomes ``action/value``, as ``action`` names the training target), ``reward``,
``discount`` and ``is_first``/``is_last``/``is_terminal`` too; ``mapping`` renames or (``None``)
skips any. The language instruction (a ``Text``, a string tensor, or a tensor of UTF-8 codes as
language_table's; ``task_key`` chooses among several) is the segment's task; ``episode_metadata``
and the other texts go into its metadata (a metadata tensor too large for the catalog becomes a
one-step array stream ``episode_metadata/<key>``). Step ``k`` is at ``round(k · 1e9 / fps)`` ns
(``fps`` given, else the dataset's known control rate, ``RATES``), where the packer's grid at the
same rate lands exactly (``rayform.packer.align``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import numpy as np

from rayform.converters.array_records import array_records
from rayform.converters.rlds_features import NAME, Feature, default_stream_name, parse_features
from rayform.converters.rlds_order import episode_numbers
from rayform.converters.rlds_values import (
    MAX_META_VALUES,
    check_image,
    meta_value,
    step_count,
    tensor,
    texts_into,
    texts_of,
)
from rayform.converters.source_files import SourceFiles, reader_size
from rayform.converters.source_json import source_json
from rayform.converters.source_options import SourceOptions
from rayform.converters.stream_names import StreamNames
from rayform.converters.tfrecord import parse_example, records
from rayform.errors import InvalidInput
from rayform.pack.spec import check_fps
from rayform.recordings.streams import ArrayStream, ImageStream, Stream

NS = 1_000_000_000
# Control rates (Hz) the datasets state (their papers; Open X-Embodiment's dataset table); any
# other dataset needs fps given.
RATES = {"fractal20220817_data": 3.0, "bridge": 5.0, "bridge_dataset": 5.0, "droid": 15.0, "language_table": 10.0,
         "berkeley_autolab_ur5": 5.0}
FORMATS = ("tfrecord", "array_record")


@dataclass(frozen=True)
class Shard:
    split: str
    index: int  # of the split's shards
    path: PurePath
    numbers: tuple[int, ...]  # each record's place in the split, in TFDS's reading order
    episodes: int  # as dataset_info.json counts them


class RldsDataset:
    """An RLDS dataset folder (local or an fsspec URL), its schema and shards."""

    def __init__(self, root: str | os.PathLike[str], mapping: Mapping[str, str | None] | None = None,
                 storage_options: dict[str, Any] | None = None, fps: float | None = None,
                 task_key: str | None = None, docs: tuple[str, str] | None = None):
        """``docs``: dataset_info.json's and features.json's texts as already read (an ingest's
        planner reads them once and hands them to every shard's task: one schema for all, and
        no request a task)."""
        self.files = SourceFiles(root, storage_options)
        self.root = self.files.root
        self.docs = docs or (_read(self.files, self.root / "dataset_info.json"),
                             _read(self.files, self.root / "features.json"))
        self.info = _json(self.docs[0], self.root / "dataset_info.json")
        self.name = str(self.info.get("name", ""))
        if not NAME.fullmatch(self.name) or ".." in self.name:
            raise InvalidInput(f"{self.root}/dataset_info.json: name {self.name[:60]!r} is not a dataset's name")
        self.format = str(self.info.get("fileFormat", "tfrecord"))
        if self.format not in FORMATS:
            raise InvalidInput(f"{self.root}: shards in {self.format[:40]}; {' and '.join(FORMATS)} shards are read")
        # TFDS reads shard after shard where the dataset was prepared unshuffled or as a data source
        self.sequential = self.format == "array_record" or self.info.get("disableShuffling") is True
        self.features = parse_features(_json(self.docs[1], self.root / "features.json"), f"{self.root}/features.json")
        self.given_fps = fps
        texts = [f.path.removeprefix("steps/") for f in self.features if f.step and f.kind == "text" and f.skip is None]
        if task_key is not None and task_key not in texts:
            raise InvalidInput(f"{self.root}: --task-key {task_key!r} is no text feature of a step. It has: "
                               f"{', '.join(texts) or 'none'}")
        self.task_key = task_key or next((t for t in texts if "instruction" in t.rsplit("/", 1)[-1]), None)
        readable = [f for f in self.features if f.step and f.skip is None and f.kind != "text"]
        self.large_meta = [f for f in self.features if not f.step and f.skip is None and f.kind == "tensor"
                           and f.size > MAX_META_VALUES]
        self.mapping = StreamNames(str(self.root), lambda key: default_stream_name(f"steps/{key}"), mapping,
                                   "step feature").table(f.path.removeprefix("steps/") for f in readable)

    @property
    def fps(self) -> float:
        if self.given_fps is not None:
            return check_fps(self.given_fps, "--fps")
        if self.name in RATES:
            return RATES[self.name]
        raise InvalidInput(f"{self.root}: {self.name} does not state its control rate; pass --fps "
                           f"(known: {', '.join(f'{k} {v:g} Hz' for k, v in sorted(RATES.items()))})")

    def splits(self) -> dict[str, list[int]]:
        """Each split's episodes per shard, as ``dataset_info.json`` lists them."""
        out: dict[str, list[int]] = {}
        listed = self.info.get("splits")
        if not isinstance(listed, list) or not all(isinstance(split, dict) for split in listed):
            raise InvalidInput(f"{self.root}/dataset_info.json: splits are not a list of splits")
        for split in listed:
            name = str(split.get("name", ""))
            if not NAME.fullmatch(name) or "." in name:
                raise InvalidInput(f"{self.root}/dataset_info.json: split {name[:60]!r} is not a split's name")
            try:
                lengths = [int(n) for n in split.get("shardLengths", [])]
            except (TypeError, ValueError, OverflowError):
                raise InvalidInput(f"{self.root}/dataset_info.json: split {name}: shardLengths are not counts") from None
            if any(n < 0 or n > 1 << 40 for n in lengths) or len(lengths) > 100_000:
                raise InvalidInput(f"{self.root}/dataset_info.json: split {name}: shardLengths are not counts")
            out[name] = lengths
        if not out:
            raise InvalidInput(f"{self.root}/dataset_info.json: no splits")
        return out

    def shards(self, splits: list[str] | None = None, only: tuple[str, int] | None = None) -> list[Shard]:
        """The shards of ``splits`` (default all), or the one ``only`` names (``(split, index)``:
        an ingest's task, which need not make the others)."""
        known = self.splits()
        for s in splits or []:
            if s not in known:
                raise InvalidInput(f"{self.root}: no split {s!r}. It has: {', '.join(known)}")
        out = []
        for split, lengths in known.items():
            if splits and split not in splits:
                continue
            numbers = episode_numbers(tuple(lengths), self.sequential)
            for i, n in enumerate(lengths):
                if only is not None and (split, i) != tuple(only):
                    continue
                name = f"{self.name}-{split}.{self.format}-{i:05d}-of-{len(lengths):05d}"
                out.append(Shard(split, i, self.files.inside(self.root / name, f"shard {name}"),
                                 tuple(numbers[i].tolist()), n))
        return out

    def episodes(self, shard: Shard) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
        """A shard's episodes, read one record at a time."""
        what = f"{shard.path}"
        fps = self.fps
        count = 0
        for r, box in enumerate(self._records(shard, what)):
            if r >= shard.episodes:
                raise InvalidInput(f"{what}: more records than the {shard.episodes} dataset_info.json lists")
            index = shard.numbers[r]
            example = parse_example(box.pop(), f"{what}: record {r}")  # the record freed once parsed
            yield (f"{self.name}/{shard.split}/episode_{index:06d}",
                   *self.episode(example, fps, f"{what}: record {r}",
                                 {"split": shard.split, "episode_index": index, "shard": shard.index, "record": r}))
            del example
            count += 1
        if count != shard.episodes:
            raise InvalidInput(f"{what}: {count} records, dataset_info.json lists {shard.episodes} (truncated?)")

    def _records(self, shard: Shard, what: str) -> Iterator[list[bytes]]:
        missing = f"{what}: missing (dataset_info.json lists {shard.episodes} episodes in it)"
        if self.format == "array_record":
            if not self.files.is_file(shard.path):
                raise InvalidInput(missing)
            yield from array_records(self.files, shard.path, what, shard.episodes)
            return
        try:
            f = self.files.reader(shard.path)
        except (FileNotFoundError, IsADirectoryError):
            raise InvalidInput(missing) from None
        with f:
            yield from records(f, reader_size(f), what)

    def episode(self, example: dict[str, Any], fps: float, what: str,
                where: dict[str, Any]) -> tuple[list[Stream], dict[str, Any]]:
        """One episode's streams and metadata, from its parsed Example."""
        read = [f for f in self.features if f.skip is None]
        for f in read:
            if f.path not in example:
                raise InvalidInput(f"{what}: feature {f.path} is missing (features.json declares it)")
        steps = step_count(example, [f for f in read if f.step], what)
        t = np.round(np.arange(steps) * (NS / fps)).astype(np.int64)
        streams: list[Stream] = []
        meta: dict[str, Any] = {"source": "rlds", "dataset": self.name, **where}
        texts: dict[str, list[str]] = {}
        for f in read:
            values = example[f.path]
            fwhat = f"{what}, feature {f.path}"
            if not f.step:
                if f in self.large_meta:  # too large for the catalog: one value, at the episode's start
                    streams.append(ArrayStream(_held_name(f), t[:1], tensor(f, values, 1, fwhat),
                                               meta={"source_feature": f.path}))
                    continue
                group = meta.setdefault(_meta_group(f), {})
                value = meta_value(f, values, fwhat)
                if value is not None:
                    group[f.path.removeprefix("episode_metadata/")] = value
                continue
            if f.kind == "text":
                texts[f.path.removeprefix("steps/")] = texts_of(f, values, steps, fwhat)
                continue
            name = self.mapping.get(f.path.removeprefix("steps/"))
            if name is None:
                continue
            if f.kind == "image":
                check_image(f, values, fwhat)
                streams.append(ImageStream(name, t, values, meta={"source_feature": f.path}))
            else:
                streams.append(ArrayStream(name, t, tensor(f, values, steps, fwhat),
                                           meta={"source_feature": f.path}))
        if not steps or not streams:
            raise InvalidInput(f"{what}: {'no steps' if not steps else 'no stream to store (all skipped)'}")
        texts_into(meta, texts, self.task_key)
        return streams, meta


def _meta_group(f: Feature) -> str:
    """Where an episode-level feature goes in the segment's metadata."""
    return "episode_metadata" if f.path.startswith("episode_metadata/") else "features"


def _held_name(f: Feature) -> str:
    """The one-step stream an episode-level tensor too large for the catalog becomes."""
    return f.path if f.path.startswith("episode_metadata/") else f"episode_metadata/{f.path}"


def _read(files: SourceFiles, path: PurePath) -> str:
    try:
        return files.read_text(path)
    except FileNotFoundError:
        raise InvalidInput(f"{files.url}: no {path.name}; an RLDS dataset folder (<name>/<version>/) has "
                           "dataset_info.json and features.json") from None


def _json(text: str, path: PurePath) -> dict[str, Any]:
    doc = source_json(text, str(path))
    if not isinstance(doc, dict):
        raise InvalidInput(f"{path}: not a JSON object, as TFDS writes it")
    return doc


def iter_rlds(root: str | os.PathLike[str], options: SourceOptions) -> Iterator[tuple[str, list[Stream], dict[str, Any]]]:
    """The episodes of a dataset (its ``splits``, or every split), or of one ``shard``
    (``(split, index)``: an ingest's task)."""
    ds = RldsDataset(root, options.mapping, options.storage_options, options.fps, options.task_key, options.docs)
    for shard in ds.shards(list(options.splits) if options.splits else None, options.shard):
        yield from ds.episodes(shard)


def describe(root: str | os.PathLike[str], options: SourceOptions) -> list[str]:
    """What ``rayform ingest rlds --list`` prints: splits and counts, then each feature and exactly
    where it goes (a stream, the task, a metadata key) or why it is dropped."""
    ds = RldsDataset(root, options.mapping, options.storage_options, options.fps, options.task_key)
    splits = ds.splits()
    rate = f"{ds.fps:g} Hz" if options.fps is not None or ds.name in RATES else "rate not stated (--fps)"
    order = "shard after shard" if ds.sequential else "TFDS's interleaved order"
    lines = [f"{ds.root}: RLDS {ds.name} {ds.info.get('version', '')} ({ds.format} shards), {rate}; "
             + ", ".join(f"{s}: {sum(n)} episodes in {len(n)} shards" for s, n in splits.items())
             + f"; episodes numbered in {order}"]
    for f in ds.features:
        shape = "x".join(str(d) for d in f.shape) or "scalar"
        key = f.path.removeprefix("steps/")
        if f.skip:
            target = f"dropped: {f.skip}"
        elif not f.step and f in ds.large_meta:
            target = f"stream {_held_name(f)} (one value at the start: {f.size} values are too many for the catalog)"
        elif not f.step:
            target = f"metadata {_meta_group(f)}.{f.path.removeprefix('episode_metadata/')}"
        elif f.kind == "text":
            target = ("task (each distinct value under metadata texts too)" if key == ds.task_key
                      else f"metadata texts.{key} (its distinct values)")
        elif ds.mapping.get(key) is None:
            target = "dropped: mapped to nothing"
        else:
            target = f"stream {ds.mapping[key]}"
        kind = f"image {f.encoding or 'jpeg/png as the bytes say'}" if f.kind == "image" else \
            "text codes" if f.encoding == "codes" else f.kind
        lines.append(f"  {f.path:44} {kind:11} {f.dtype:8} {shape:12} -> {target}")
    return lines
