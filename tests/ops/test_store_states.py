"""Nothing lost, as a property: random sequences of what users do to a store (add segments of
every stream kind, recorded video kept; an ingest that fails midway; slices and splits; packs
as JPEG or H.264, with history, resized; push to a second store and pull from it; gc with no
grace; a blob corrupted or deleted; two ingests and a compaction at once; a catalog part, under
its true name, that is wrong itself or lists a segment in a bundle wrong inside) and, after every
step:

- what reading every visible object touches (every version every segment ref lists, every
  slice, every pack, read whole) is what the reference walk reaches, no less: a blob the
  walk missed is one gc deletes and push leaves behind;
- every blob the walk reaches is present and whole, but those the test damaged itself;
- ``verify`` of a slice and its packs says ok exactly when reading them whole succeeds;
- a pushed slice reads back at the destination identical, and its pull caches every blob a
  dataset reads;
- concurrent ingests record every version they return, and a compaction leaves one row a
  version.

CI runs a bounded number of sequences; ``RAYFORM_STATES=500 python -m pytest
tests/ops/test_store_states.py`` is the longer run.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid

import numpy as np
import pytest
from conftest import moving_texture, recorded_video
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import rayform
from hostile import hostile_bundles
from rayform.codec import imagecodec
from rayform.errors import InvalidInput, RayformError
from rayform.ops.pull import pull
from rayform.ops.push import push
from rayform.ops.references import pack_closure, slice_closure, store_closure
from rayform.ops.verify import verify
from rayform.read.reader import PackReader
from rayform.store.store import Store

pytestmark = pytest.mark.slow
FRAMES, SIZE = 12, 32
T = np.arange(FRAMES, dtype=np.int64) * 66_666_667  # 15 fps
CAMERAS = ["jpeg", "raw", "video"]
EXTRAS = ["pose", "png", "depth"]


def _segment(camera: str, extras: list[str], seed: int) -> list:
    rng = np.random.default_rng(seed)
    frames = moving_texture(FRAMES, SIZE, seed)
    if camera == "jpeg":
        cam = rayform.ImageStream("cam/rgb", T, [imagecodec.encode_jpeg(f) for f in frames])
    elif camera == "raw":
        cam = rayform.ImageStream("cam/rgb", T, frames)
    else:
        cam = _retimed(recorded_video(FRAMES + 2, lead=2, size=SIZE, seed=seed)[0])
    streams = [cam, rayform.ArrayStream("joints", T, np.cumsum(rng.normal(0, 0.1, (FRAMES, 3)), 0).astype(np.float32))]
    if "pose" in extras:
        q = np.tile([0.0, 0.0, 0.0, 1.0], (FRAMES, 1))
        streams.append(rayform.PoseStream("ee/pose", T, np.concatenate([rng.normal(size=(FRAMES, 3)), q], 1)))
    if "png" in extras:
        streams.append(rayform.ImageStream("cam/png", T, [imagecodec.encode_png(f[:8, :8]) for f in frames]))
    if "depth" in extras:
        streams.append(rayform.ImageStream("cam/depth", T, rng.integers(0, 4000, (FRAMES, 8, 8)).astype(np.uint16)))
    return streams


def _retimed(video: rayform.VideoStream) -> rayform.VideoStream:
    """A recorded video (two lead-in frames) on the segment's clock: its frames at ``T``."""
    times = (np.arange(len(video.packets), dtype=np.int64) - 2) * int(T[1])
    return rayform.VideoStream("cam/rgb", times[2:], video.packets, times, video.keyframes, video.codec, video.width,
                               video.height, video.extradata)


@contextlib.contextmanager
def _touched():
    """The digests of every blob whose place in a store is looked up meanwhile (a reader reaches
    a blob only through ``Store.blob_path``), read as a new process would: nothing of what this
    one keeps of earlier reads (mapped bundles, decoded catalog parts) is used."""
    from rayform.packer import render
    from rayform.recordings import bundles, catalog

    bundles._OPEN.clear()
    catalog._TABLES.clear()
    catalog._CATALOGS.clear()
    render._SEGMENTS.clear()
    seen: set[str] = set()
    real = Store.blob_path

    def blob_path(self, digest):
        seen.add(digest)
        return real(self, digest)

    Store.blob_path = blob_path
    try:
        yield seen
    finally:
        Store.blob_path = real


def _read_segment(seg) -> list:
    """Everything a segment version holds, read whole (video: its packet index and first frame)."""
    out = []
    for name, info in seg.streams.items():
        out.append(seg.timestamps(name).tobytes())
        if not info.is_image:
            out.append(seg.values(name).tobytes())
        elif info.encoding == "raw":
            out.extend(seg.frame_array(name, i).tobytes() for i in range(info.count))
        else:
            count = info.video.packets if info.video is not None else info.count
            out.extend(bytes(seg.frame_view(name, i)) for i in range(count))
            if info.video is not None:
                out.append(seg.video(name).frame(0).tobytes())
    return out


def _read_pack(store, pack) -> list:
    """A pack as every reader reads it: its samples, the chunk digests a reader of a remote
    store verifies shards with as they arrive, and what it says of each segment (``show``)."""
    reader = PackReader(store, pack, pack.members)
    try:
        reader.chunk_digests()
        pack.segments_of(store)
        return [{m: bytes(v) for m, v in raw.items() if not m.startswith("__")}
                for _, raw in reader.raw_many(np.arange(pack.samples))]
    finally:
        for shard in range(len(pack.shards)):
            reader.release(shard)


class StoreStates(RuleBasedStateMachine):
    @initialize()
    def stores(self):
        from rayform.recordings import segment_writer

        segment_writer.time = _Clock()  # every sequence from the same clock (the fixture puts time back)
        root = self._root = self._tmp / uuid.uuid4().hex[:8]
        self.source = rayform.Client(root / "store")
        self.dest = rayform.Client(f"memory://states-{uuid.uuid4().hex[:8]}", cache=root / "cache")
        self.damaged: set[str] = set()
        self.hostile: dict[str, str] = {}  # a hostile object's blob -> the catalog part ref that made it visible
        self.originals: dict[str, bytes] = {}
        self.pushed: set[str] = set()
        self.refs: list = []
        self.slice_ids: list[str] = []
        self.seed = 0

    def broken(self) -> bool:
        """Whether the test damaged the store or planted something hostile in it: only then
        may a user's step fail."""
        return bool(self.damaged or self.hostile)

    # -- what users do ---------------------------------------------------------------------
    @rule(made=st.lists(st.tuples(st.sampled_from(CAMERAS), st.lists(st.sampled_from(EXTRAS), unique=True),
                                  st.sampled_from(["a", "b", "c", "d", "e"])), min_size=1, max_size=3))
    def add_segments(self, made):
        for camera, extras, name in made:
            self.seed += 1
            try:  # a name given again is a new version of that segment; the old one stays readable
                self.refs.append(self.source.segments.add("lab", name, _segment(camera, extras, self.seed)))
            except RayformError:
                assert self.broken(), "adding a segment failed on a whole store"

    @precondition(lambda self: self.refs)
    @rule(data=st.data())
    def create_slice(self, data):
        chosen = data.draw(st.lists(st.sampled_from(self.refs), min_size=1, max_size=4,
                                    unique_by=lambda r: (r.id, r.version)))
        try:
            self.slice_ids.append(self.source.slices.create(chosen).id)
        except RayformError:
            assert self.broken(), "a slice could not be made on a whole store"

    @precondition(lambda self: self.slice_ids)
    @rule(data=st.data())
    def split_slice(self, data):
        try:
            self.slice_ids.append(self.source.slices.split(data.draw(st.sampled_from(self.slice_ids)),
                                                           {"train": 0.5, "val": 0.5})["train"].id)
        except RayformError:  # a split that got no segment, or a damaged store
            pass

    @precondition(lambda self: self.slice_ids)
    @rule(data=st.data(), codec=st.sampled_from(["jpeg", "h264"]), history=st.integers(0, 1),
          resize=st.sampled_from([None, (16, 16)]))
    def pack(self, data, codec, history, resize):
        try:
            self.source.pack(data.draw(st.sampled_from(self.slice_ids)), 15, streams=["cam/rgb", "joints"],
                             image_codec=codec, max_history=history, max_horizon=2, resize=resize, workers=1,
                             progress=False, shard_bytes=1 << 16, force=True)
        except RayformError:
            assert self.broken(), "a pack failed on a whole store"

    @precondition(lambda self: self.slice_ids)
    @rule(data=st.data())
    def push_and_pull(self, data):
        slice_id = data.draw(st.sampled_from(self.slice_ids))
        try:
            push(self.source, slice_id, self.dest, progress=False)
        except RayformError:
            assert self.broken(), "a push failed on a whole store"
            return
        self.pushed.add(slice_id)
        if self.dest.packs.list(slice_id):
            report = pull(self.dest, slice_id, progress=False)
            cache = self.dest.store.cache
            for pack in report.packs:  # everything a dataset reads of the pack is in the cache
                assert all(cache.has(r.blob) for r in pack_closure(pack))

    @rule(made=st.lists(st.tuples(st.sampled_from(CAMERAS), st.sampled_from(["a", "b", "f", "g", "h"])), min_size=2,
                        max_size=4), compacting=st.booleans())
    def concurrent_writes(self, made, compacting):
        """Two ingests and (maybe) a compaction of the site at once, each its own client: every
        version an ingest returns is recorded, and compacting afterwards leaves one row each."""
        batches: list[list] = [[], []]
        for i, (camera, name) in enumerate(made):
            self.seed += 1
            batches[i % 2].append(("lab", name, _segment(camera, [], self.seed), None))
        returned: list[list] = [[], []]
        failed: list[RayformError] = []

        def ingest(i):
            try:
                returned[i] = rayform.Client(self._root / "store").segments.add_many(batches[i])
            except RayformError as e:
                failed.append(e)

        def compact():
            try:
                rayform.Client(self._root / "store").segments.compact("lab")
            except RayformError as e:
                failed.append(e)

        from rayform.recordings import segment_writer

        threads = [threading.Thread(target=ingest, args=(i,), name=f"writer-{i}") for i in range(2)]
        threads += [threading.Thread(target=compact, name="compactor")] if compacting else []
        with segment_writer.time.lanes_for([t.name for t in threads]):
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        returned_refs = [*returned[0], *returned[1]]
        self.refs.extend(returned_refs)
        if self.broken():
            return
        assert not failed, failed
        self.source.segments.compact("lab")
        table = self.source.segments.catalog.table(site="lab", columns=["id", "version"])
        rows = list(zip(table.column("id").to_pylist(), table.column("version").to_pylist()))
        assert len(rows) == len(set(rows)), "a compaction kept two rows of one version"
        assert {(r.id, r.version) for r in returned_refs} <= set(rows), "an ingest's version is not recorded"

    @precondition(lambda self: self.refs)
    @rule(data=st.data(), kind=st.sampled_from(["a member not hashing to its name", "the manifest absent",
                                                "members overlapping", "not a bundle", "part not parquet",
                                                "part rows lie", "part names a path"]))
    def hostile_part(self, data, kind):
        """A catalog part made visible by a ref, its blob under its true name: either wrong itself,
        or listing a segment in a bundle that is wrong inside (as a hostile store holds them)."""
        from rayform.recordings import catalog as catalog_module
        from rayform.recordings.catalog_parts import COLUMNS, CatalogParts, encode_table, new_key, ref_key
        from rayform.recordings.segment_writer import segment_id

        ref = data.draw(st.sampled_from(self.refs))
        try:
            seg = self.source.segments.get(ref.id, ref.version)
            table = self.source.segments.catalog.table(site="lab")
        except RayformError:
            return
        mask = [i == ref.id and v == ref.version for i, v in zip(table.column("id").to_pylist(),
                                                                  table.column("version").to_pylist())]
        row = table.filter(mask).slice(0, 1).select(list(COLUMNS))
        if seg.bundle is None or row.num_rows == 0:
            return
        import pyarrow as pa

        def column(table, name, value):
            return table.set_column(table.schema.get_field_index(name), name, pa.array([value], pa.string()))

        self.seed += 1
        name = f"hostile-{self.seed}"
        row = column(column(row, "id", segment_id("lab", name)), "name", name)
        rows, bundle = 1, None
        if kind == "part not parquet":
            part = b"PAR1 not a parquet file"
        elif kind == "part rows lie":
            part, rows = encode_table(row), 99
        elif kind == "part names a path":
            part = encode_table(column(row, "bundle", "../../etc/passwd"))
        else:
            bundle = self.source.store.put_blob(hostile_bundles(seg)[kind])
            part = encode_table(column(row, "bundle", bundle))
        digest = self.source.store.put_blob(part)
        key = ref_key("lab", new_key())
        self.source.store.put_ref(key, {"format": "rayform.catalog-part/1", "part": digest, "rows": rows,
                                        "replaces": []})
        self.hostile[bundle or digest] = key  # the part is sound where the bundle it lists is not
        catalog_module._TABLES.clear()
        assert CatalogParts(self.source.store).listed("lab")

    # what happens now and then: one rule, so the steps above come as often as each of these
    @rule(data=st.data(), action=st.sampled_from(["fail", "gc", "gc", "damage", "repair"]))
    def meanwhile(self, data, action):
        if action == "fail":
            self.an_ingest_fails_midway(data.draw(st.sampled_from(CAMERAS)))
        elif action == "gc":
            self.gc_with_no_grace()
        elif action == "damage":
            self.damage_a_blob(data, data.draw(st.sampled_from(["corrupt", "delete"])))
        else:
            self.repair()

    def an_ingest_fails_midway(self, camera):
        def visible() -> object:
            try:
                return sorted(self.source.segments.catalog.table(columns=["id", "version"]).to_pylist(), key=str)
            except RayformError:  # a damaged catalog part: what is visible cannot be said
                return None

        before = visible()
        good = [("lab", f"fails-{i}", _segment(camera, ["pose"], 1000 + i), None) for i in range(2)]
        bad = _segment("jpeg", [], 2000)
        bad[1] = rayform.ArrayStream("joints", T, np.full((FRAMES, 3), np.nan, np.float32))
        with pytest.raises(InvalidInput):
            self.source.segments.add_many([*good, ("lab", "fails-bad", bad, None)])
        assert visible() == before

    def gc_with_no_grace(self):
        from rayform.ops.gc import collect

        try:
            collect(self.source, delete=True, grace_s=0, force=True)
        except RayformError:
            assert self.broken(), "gc failed on a whole store"  # a manifest it cannot read stops it

    def damage_a_blob(self, data, how):
        blobs = sorted(b.digest for b in self.source.store.list_blobs())
        if not blobs:
            return
        # an index drawn from a fixed range: how many blobs two concurrent ingests leave varies
        # run to run, and a draw whose bounds vary makes hypothesis's replay of a case flaky
        digest = blobs[data.draw(st.integers(0, 1 << 16)) % len(blobs)]
        path = self.source.store.blob_file(digest)
        # a blob damaged twice (corrupted, then deleted) is repaired to its first, whole bytes
        self.originals.setdefault(digest, path.read_bytes())
        if how == "delete":
            path.unlink()
        else:
            raw = bytearray(path.read_bytes())
            raw[len(raw) // 2] ^= 0xFF
            path.write_bytes(bytes(raw))
        self.damaged.add(digest)

    def repair(self):
        """Every damaged blob re-created from its source (what verify's message asks), and every
        hostile part's ref removed (what gc's message asks); a hostile row a compaction folded
        into a part of its own stays (nothing says which rows to drop)."""
        for digest, key in sorted(self.hostile.items()):
            if self.source.store.has_ref(key):
                self.source.store.delete_ref(key)
        for digest in sorted(self.damaged):
            path = self.source.store.blob_file(digest)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.originals[digest])
        self.damaged.clear()
        # what is still reached once every blob is whole again: a damaged part that folded a
        # hostile row (a compaction's) hid that row's bundle from a walk made before
        reached = {r.blob for r in store_closure(self.source.store, strict=False)}
        self.hostile = {d: key for d, key in self.hostile.items() if d in reached}

    # -- what must hold after every step ---------------------------------------------------
    def _slices(self) -> list[tuple[str, object]]:
        """Each slice ref's id and its Slice, or the error reading its manifest raised."""
        out: list[tuple[str, object]] = []
        for sid, _, _ in self.source.slices.refs():
            try:
                out.append((sid, self.source.slices.get(sid)))
            except RayformError as e:
                out.append((sid, e))
        return out

    def _packs(self, slice_id: str | None = None) -> list[object]:
        out: list[object] = []
        for ref in self.source.packs.refs(slice_id):
            try:
                out.append(self.source.packs.read(ref))
            except RayformError as e:
                out.append(e)
        return out

    def _read_slice(self, s, packs) -> bool:
        """Whether a slice (its segment versions) and its packs read back whole."""
        try:
            if isinstance(s, RayformError):
                raise s
            for i in range(len(s.segments)):
                _read_segment(s.segment(i))
            for pack in packs:
                if isinstance(pack, RayformError):
                    raise pack
                _read_pack(self.source.store, pack)
        except RayformError:
            return False
        return True

    def _read_everything(self) -> tuple[set[str], bool]:
        """(the blobs reading every visible object whole touches, whether every read succeeded)."""
        ok = True
        with _touched() as seen:
            try:  # every version of every segment the catalog lists
                listed = self.source.segments.catalog.table(columns=["id", "version"])
                versions = list(dict.fromkeys(zip(listed.column("id").to_pylist(), listed.column("version").to_pylist())))
            except RayformError:  # a catalog part is damaged: what it lists cannot be read
                ok, versions = False, []
            for segment_id, version in versions:
                try:
                    _read_segment(self.source.segments.get(segment_id, version))
                except RayformError:
                    ok = False
            for _, s in self._slices():
                ok &= self._read_slice(s, [])
            for pack in self._packs():
                try:
                    if isinstance(pack, RayformError):
                        raise pack
                    _read_pack(self.source.store, pack)
                except RayformError:
                    ok = False
        return seen, ok

    @invariant()
    def nothing_is_lost(self):
        """The three checks of the module's docstring, after every step."""
        if not hasattr(self, "source"):
            return
        self.the_walk_reaches_all_reading_touches_and_all_it_reaches_is_whole()
        self.verify_says_ok_exactly_when_a_slice_and_its_packs_read_whole()
        self.a_pushed_slice_reads_back_identical_at_the_destination()

    def the_walk_reaches_all_reading_touches_and_all_it_reaches_is_whole(self):
        touched, read_ok = self._read_everything()
        references = list(store_closure(self.source.store, strict=False))
        walk = {r.blob for r in references}
        assert touched <= walk, f"reading touches blobs the walk misses: {sorted(touched - walk)[:3]}"
        report = verify(self.source.store, references)  # bundles opened, unreadable objects said
        bad = {p.blob for p in report.problems}
        planted = self.damaged | set(self.hostile)
        assert bad <= planted, f"lost or corrupted, not by the test: {sorted(bad - planted)[:3]}"
        missed = set(self.hostile) & walk - bad
        assert not missed, f"verify vouched for a hostile object: {sorted(missed)[:3]}"
        assert bad or not self.hostile, "verify vouched for a store holding a hostile object"
        assert read_ok == (not bad & touched)

    def verify_says_ok_exactly_when_a_slice_and_its_packs_read_whole(self):
        for sid, s in self._slices():
            packs = self._packs(sid)
            whole = self._read_slice(s, packs)
            if isinstance(s, RayformError):  # its manifest is bad: verify cannot begin, which says so
                assert not whole
                continue
            report = verify(self.source.store, [*slice_closure(s), *(r for p in packs if not isinstance(p, RayformError)
                                                                      for r in pack_closure(p))])
            reported = report.ok and not any(isinstance(p, RayformError) for p in packs)
            assert reported == whole, (sid, report.problems)

    def a_pushed_slice_reads_back_identical_at_the_destination(self):
        for slice_id in self.pushed:
            there = self.dest.slices.get(slice_id)
            try:
                here = self.source.slices.get(slice_id)
                mine = [_read_segment(here.segment(i)) for i in range(len(here.segments))]
                packs = {p.key: _read_pack(self.source.store, p) for p in self.source.packs.list(here)}
            except RayformError:
                continue  # damaged here since it was pushed: the copy is what is left
            assert [_read_segment(there.segment(i)) for i in range(len(there.segments))] == mine
            theirs = {p.key: p for p in self.dest.packs.list(there)}
            for key, samples in packs.items():
                if key in theirs:
                    assert _read_pack(self.dest.store, theirs[key]) == samples


class _Clock:
    """``time`` for the segment writer: what a catalog row says was recorded when, counted (the
    same sequence of steps writes the same bytes, so hypothesis can replay it). Writers running
    at once each count on a lane of their own, so their times do not depend on how they
    interleave."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000_000_000
        self.lanes: dict[str, int] = {}

    def time_ns(self) -> int:
        lane = threading.current_thread().name
        if lane in self.lanes:
            self.lanes[lane] += 1_000_000
            return self.lanes[lane]
        self.now += 1_000_000
        return self.now

    @contextlib.contextmanager
    def lanes_for(self, names: list[str]):
        self.lanes = {name: self.now + i * 1_000 for i, name in enumerate(names)}
        try:
            yield
        finally:
            self.now, self.lanes = max([self.now, *self.lanes.values()]), {}


@pytest.fixture
def store_states(tmp_path, monkeypatch):
    from rayform.packer import driver
    from rayform.recordings import segment_writer, slices

    monkeypatch.setattr(segment_writer, "time", _Clock())
    # the forms a collection's objects take, at a few segments: a slice's segments as a table
    # blob, a pack's per-segment entries as a blob of their own
    monkeypatch.setattr(slices, "TABLE_AT", 3)
    monkeypatch.setattr(driver, "SEGMENTS_APART", 3)
    StoreStates._tmp = tmp_path
    yield StoreStates


@pytest.mark.timeout(1800)
def test_nothing_is_lost_whatever_users_do(store_states):
    examples = int(os.environ.get("RAYFORM_STATES", "15"))
    settings_ = settings(max_examples=examples, stateful_step_count=20, deadline=None,
                         suppress_health_check=list(HealthCheck))
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(store_states, settings=settings_)
