"""Packs with video cameras: clips laid out together, the same bytes from any number of
workers, a tenth of JPEG's bytes on real camera frames at JPEG's PSNR."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
from conftest import add_video_slice, moving_texture

import rayform
from rayform.codec import records
from rayform.codec.video import psnr
from rayform.pack.layout import CLIPS
from rayform.pack.spec import PackSpec
from rayform.read.reader import PackReader


def test_a_clip_s_samples_lie_together_in_one_shard_and_the_first_holds_it(video_packs):
    client, s, _, pack = video_packs
    assert pack.members == [CLIPS] and pack.index_lead == 4
    reader = PackReader(client.store, pack, pack.members)
    rows = np.asarray(reader.index)
    starts = rows[:, 1]
    places = rows[:, 3]
    clips = np.split(np.arange(len(rows)), np.flatnonzero(np.diff(starts) != 0) + 1)
    seen = set()
    for clip in clips:
        assert len(set(rows[clip, 0])) == 1  # one shard
        assert places[clip].tolist() == list(range(len(clip)))  # in order, from its first
        doc = records.loads(bytes(reader.raw(int(clip[0]))[1][CLIPS]))
        record = doc["record"]
        assert record["samples"] == len(clip) and set(doc["video"]) == {"cam/rgb"}
        assert np.all(np.diff(record["index"]) == 1)  # consecutive grid steps of one segment
        seen.add((record["segment"], record["index"][0]))
    assert len(seen) == len(clips) == sum(-(-48 // 8) for _ in range(3))
    # a plain tar: the first sample of a clip has the member, the others none
    data = client.store.get_blob(pack.shards[0].sha256)
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert len(names) == len(clips) and all(n.endswith("." + CLIPS) for n in names)


def test_the_same_shards_from_one_worker_or_two(tmp_path):
    a, b = rayform.Client(tmp_path / "a"), rayform.Client(tmp_path / "b")
    one = a.pack(add_video_slice(a, episodes=3, frames=96, size=96), 30, image_codec="h264", max_history=1,
                 workers=1, progress=False, shard_bytes=1 << 16)
    two = b.pack(add_video_slice(b, episodes=3, frames=96, size=96), 30, image_codec="h264", max_history=1,
                 workers=2, progress=False, shard_bytes=1 << 16)
    assert one.digest == two.digest and len(one.shards) > 1


def test_a_depth_camera_stays_an_image_beside_a_video_camera(tmp_path):
    client = rayform.Client(tmp_path / "store")
    t = np.arange(24, dtype=np.int64) * round(1e9 / 30)
    depth = (np.arange(24 * 32 * 32) % 4000).astype(np.uint16).reshape(24, 32, 32)
    from conftest import moving_texture

    ref = client.segments.add("lab", "ep", [rayform.ImageStream("cam/rgb", t, moving_texture(24, 32)),
                                            rayform.ImageStream("cam/depth", t, depth),
                                            rayform.ArrayStream("joints", t, np.zeros((24, 2), np.float32))])
    s = client.slices.create([ref])
    pack = client.pack(s, 30, image_codec="h264", workers=1, progress=False)
    assert pack.schema["cam/rgb"].video is not None and pack.schema["cam/depth"].video is None
    assert pack.members == ["cam.depth.png", CLIPS]
    x = rayform.torch.EpisodeDataset(s, obs=["cam/rgb", "cam/depth"], fps=30)[5]
    assert np.array_equal(x["cam/depth"].numpy()[0], depth[x["meta"]["frame_index"]])
    assert x["cam/rgb"].shape == (3, 32, 32)


def _g1_frames(real_data) -> np.ndarray:
    """The v2.1 example's (busier) camera: its first 160 frames at 224x224."""
    import av

    from rayform.codec import imagecodec

    path = next((real_data / "lerobot_v21_unitree_g1_subset").glob("videos/**/episode_000001.mp4"))
    with av.open(str(path)) as container:
        return np.stack([imagecodec.resize(f.to_ndarray(format="rgb24"), (224, 224))
                         for _, f in zip(range(160), container.decode(video=0))])


def test_real_camera_frames_take_a_tenth_of_jpeg_s_bytes_at_jpeg_s_psnr(real_data, tmp_path):
    """The targets of benchmarks/video.py, on fewer frames: the v2.1 example's (busier) camera
    at 224x224, packed as JPEG q90 and as H.264 with the defaults."""
    frames = _g1_frames(real_data)
    client = rayform.Client(tmp_path / "store")
    t = np.arange(80, dtype=np.int64) * round(1e9 / 30)
    refs = [client.segments.add("lab", f"ep{e}", [rayform.ImageStream("cam/rgb", t, frames[e * 80:(e + 1) * 80])])
            for e in range(2)]
    s = client.slices.create(refs)
    jpeg = client.pack(s, 30, image_codec="jpeg", workers=1, progress=False)
    h264 = client.pack(s, 30, image_codec="h264", workers=1, progress=False)
    jpeg_bytes = sum(len(raw["cam.rgb.jpg"]) for _, raw in PackReader(client.store, jpeg, ["cam.rgb.jpg"])
                     .raw_many(range(jpeg.samples)))
    assert h264.schema["cam/rgb"].video.packet_bytes <= 0.15 * jpeg_bytes

    def quality(key: str) -> float:
        ds = rayform.torch.EpisodeDataset(s, obs=["cam/rgb"], fps=30, pack=key)
        got = [(ds[i]["cam/rgb"].numpy().transpose(1, 2, 0), ds[i]["meta"]) for i in range(len(ds))]
        return psnr(np.stack([g for g, _ in got]),
                    np.stack([frames[m["episode_index"] * 80 + m["frame_index"]] for _, m in got]))

    assert quality(h264.key) >= quality(jpeg.key) - 1.5


def test_bytes_a_frame_hardly_grow_at_a_lower_pack_rate(real_data, tmp_path):
    """The G1 camera recorded at 30 fps, packed at 30, 15 and 10: every clip is encoded at one
    nominal rate, so at one CRF a lower pack rate costs only what its larger steps between
    frames do (an encoder told the pack's rate spent 1.54x and 2.0x the bytes a frame); at the
    default quality each rate is within 1.5 dB of JPEG q90's PSNR as the pack measures it."""
    frames = _g1_frames(real_data)
    client = rayform.Client(tmp_path / "store")
    t = np.arange(80, dtype=np.int64) * round(1e9 / 30)
    s = client.slices.create([client.segments.add("lab", f"ep{e}", [rayform.ImageStream(
        "cam/rgb", t, frames[e * 80:(e + 1) * 80])]) for e in range(2)])
    per_frame = {}
    for fps in (30, 15, 10):
        video = client.pack(s, fps, image_codec="h264", video_crf=17, workers=1, progress=False)
        per_frame[fps] = video.schema["cam/rgb"].video.packet_bytes / video.samples
        measured = client.pack(s, fps, image_codec="h264", workers=1, progress=False).schema["cam/rgb"].video
        assert measured.psnr is not None and measured.jpeg_psnr is not None
        assert measured.psnr >= measured.jpeg_psnr - 1.5, (fps, measured)
    assert per_frame[15] <= 1.3 * per_frame[30] and per_frame[10] <= 1.45 * per_frame[30], per_frame


def test_a_clip_length_and_quality_are_the_pack_s_and_set_it_apart(video_packs):
    client, s, _, h264 = video_packs
    other = client.pack(s, 30, image_codec="h264", max_history=2, max_horizon=8, clip_frames=4, video_crf=30,
                        workers=1, progress=False)
    assert other.key != h264.key and other.schema["cam/rgb"].video.crf == 30
    assert other.schema["cam/rgb"].video.packet_bytes < h264.schema["cam/rgb"].video.packet_bytes
    with pytest.raises(rayform.InvalidInput, match="video crf 99"):
        client.pack(s, 30, image_codec="h264", video_crf=99, progress=False)
    with pytest.raises(rayform.InvalidInput, match="video crf 20.3: .* steps of 0.5"):
        client.pack(s, 30, image_codec="h264", video_crf=20.3, progress=False)
    with pytest.raises(rayform.InvalidInput, match="video crf 30.5: .* whole"):
        client.pack(s, 30, image_codec="av1", video_crf=30.5, progress=False)
    half = PackSpec(30, image_codec="h264", video_crf=20.5)
    assert half.video_crf == 20.5 and PackSpec(30, image_codec="h264", video_crf=20.0).video_crf == 20
    assert type(PackSpec(30, image_codec="h264", video_crf=20.0).video_crf) is int  # 20.0 and 20: one key
    assert PackSpec.from_manifest(half.to_manifest()) == half


def _recorded(crf: int, gop: int, frames: int = 48, seed: int = 0) -> tuple[rayform.VideoStream, np.ndarray]:
    """A camera recorded as H.264 at ``crf`` with a keyframe every ``gop`` frames, 30 fps."""
    from rayform.codec.video import PyAVDecoder
    from rayform.codec.video_encoder import VideoCodec

    clip = VideoCodec("h264", crf, None, gop).encode(moving_texture(frames, 64, seed))
    t = np.arange(frames, dtype=np.int64) * (1_000_000_000 // 30)
    decoded = PyAVDecoder().decode(clip, range(frames), None, "source")
    return (rayform.VideoStream("cam/rgb", t, list(clip.packets), t, np.isin(np.arange(frames), clip.keys), "h264",
                                64, 64, clip.extradata), np.stack([decoded[i] for i in range(frames)]))


@pytest.mark.parametrize(("crf", "gop", "kept"), [(35, 8, True), (17, 2, False)])
def test_keep_copies_packets_only_where_that_is_not_larger_than_encoding(tmp_path, crf, gop, kept):
    """Keyframes at the clips' starts and a source cheaper than encoding it again: the packets
    are copied, every frame bit for bit. A keyframe every other frame: each clip would copy
    more than encoding takes, so the pack encodes and says why."""
    client = rayform.Client(tmp_path / "store")
    refs = []
    sources = []
    for e in range(2):
        stream, frames = _recorded(crf, gop, seed=e)
        t = np.asarray(stream.timestamps)
        refs.append(client.segments.add("lab", f"ep{e}", [stream, rayform.ArrayStream("joints", t, np.zeros((48, 2)))]))
        sources.append(frames)
    s = client.slices.create(refs)
    pack = client.pack(s, 30, max_horizon=2, workers=1, progress=False)
    video = pack.schema["cam/rgb"].video
    assert video.kept == kept and (video.why is None) == kept, video
    if not kept:
        assert "keeping its packets copies" in video.why
        return
    ds = rayform.torch.EpisodeDataset(s, obs=["cam/rgb"], action="joints", fps=30, horizon=2) \
        if pytest.importorskip("torch") else None
    for i in range(0, len(ds), 5):
        x = ds[i]
        want = sources[x["meta"]["episode_index"]][x["meta"]["frame_index"]]
        assert np.array_equal(x["cam/rgb"].numpy().transpose(1, 2, 0), want)


def test_a_pack_measures_its_video_quality_and_meets_a_target_at_the_largest_crf(tmp_path):
    """Every encoded camera's PSNR (and JPEG q90's on the same frames) is in its schema; with a
    target the CRF is the largest whose PSNR meets it, so a lower target makes a smaller pack."""
    client = rayform.Client(tmp_path / "store")
    s = add_video_slice(client, episodes=3, frames=48, size=64)
    plain = client.pack(s, 30, image_codec="h264", max_horizon=2, workers=1, progress=False)
    v = plain.schema["cam/rgb"].video
    assert v.psnr is not None and v.jpeg_psnr is not None and v.psnr > 30
    high = client.pack(s, 30, image_codec="h264", video_psnr=v.psnr + 0.5, max_horizon=2, workers=1, progress=False)
    low = client.pack(s, 30, image_codec="h264", video_psnr=v.psnr - 4, max_horizon=2, workers=1, progress=False)
    hv, lv = high.schema["cam/rgb"].video, low.schema["cam/rgb"].video
    assert hv.crf < v.crf < lv.crf and hv.psnr >= v.psnr + 0.5 > lv.psnr >= v.psnr - 4
    assert hv.crf_by == f"a PSNR of {v.psnr + 0.5:g} dB"
    assert sum(sh.bytes for sh in low.shards) < sum(sh.bytes for sh in plain.shards) < sum(sh.bytes for sh in high.shards)
    with pytest.raises(rayform.InvalidInput, match="not both"):
        rayform.PackSpec(fps=30, image_codec="h264", video_psnr=40, video_crf=20)


def test_jpeg_quality_re_encodes_recorded_jpegs_when_asked(demo_client):
    """Recorded JPEGs are kept untouched under --codec jpeg; a quality asked re-encodes them
    (two qualities: two packs of other bytes), and --quality with another codec is refused."""
    client, s = demo_client
    kept = client.pack(s, 15, image_codec="jpeg", workers=1, progress=False)
    q50 = client.pack(s, 15, image_codec="jpeg", jpeg_quality=50, jpeg_reencode=True, workers=1, progress=False)
    q90 = client.pack(s, 15, image_codec="jpeg", jpeg_quality=90, jpeg_reencode=True, workers=1, progress=False)
    sizes = [sum(sh.bytes for sh in p.shards) for p in (q50, q90)]
    assert sizes[0] < sizes[1] and len({kept.key, q50.key, q90.key}) == 3
    from rayform.cli.main import main

    assert main(["--store", str(client.store.root), "pack", s.id, "--fps", "15", "--quality", "50"]) == 2


def test_the_default_quality_is_chosen_per_camera_just_within_its_distance_of_jpeg(tmp_path):
    """Unless a CRF or a PSNR is given, each camera gets the largest CRF whose PSNR on its
    sampled clips is within JPEG_DISTANCE_DB of JPEG q90's on the same frames: a camera whose
    frames code easily gets a larger CRF than one whose frames do not, each just within it
    (one step of the codec's CRF more, half a CRF for x264, would not be), and show and the
    manifest say how it was chosen."""
    from rayform.cli.show import pack_cameras
    from rayform.codec.codecs import JPEG_DISTANCE_DB, VIDEO

    client = rayform.Client(tmp_path / "store")
    rng = np.random.default_rng(0)
    refs = []
    for e in range(3):
        t = np.arange(32, dtype=np.int64) * round(1e9 / 30)
        smooth = moving_texture(32, 64, seed=e)
        grain = np.clip(smooth.astype(np.int16) + rng.normal(0, 12, smooth.shape), 0, 255).astype(np.uint8)
        refs.append(client.segments.add("lab", f"e{e}", [rayform.ImageStream("smooth/rgb", t, smooth),
                                                         rayform.ImageStream("grain/rgb", t, grain)]))
    s = client.slices.create(refs, name="two cameras")
    pack = client.pack(s, 30, image_codec="h264", max_horizon=0, workers=1, progress=False)
    chosen = {n: pack.schema[n].video for n in ("smooth/rgb", "grain/rgb")}
    for name, v in chosen.items():
        assert v.crf_by == f"JPEG q90 − {JPEG_DISTANCE_DB:g} dB"
        assert v.psnr >= v.jpeg_psnr - JPEG_DISTANCE_DB, (name, v)
        one_more = client.pack(s, 30, image_codec="h264", video_crf=v.crf + VIDEO["h264"].crf_step, max_horizon=0, workers=1,
                               progress=False).schema[name].video
        assert one_more.crf_by == "given" and one_more.psnr < v.jpeg_psnr - JPEG_DISTANCE_DB, (name, one_more)
    assert chosen["smooth/rgb"].crf != chosen["grain/rgb"].crf
    lines = pack_cameras(pack)
    assert any(f"crf {chosen['grain/rgb'].crf} (chosen for this camera: JPEG q90" in line for line in lines), lines


def test_the_quality_is_chosen_on_the_episode_not_on_its_first_still_frames(tmp_path):
    """Episodes that open at rest (their first 16 frames one image) and then move: the CRF is
    chosen on groups from the middle of the episodes, so the whole pack, read back, is within
    1.5 dB of JPEG q90's PSNR. Chosen on the first groups (still frames code at any CRF), the
    CRF would be the largest tried and the moving frames far below JPEG's."""
    from rayform.codec import imagecodec

    client = rayform.Client(tmp_path / "store")
    rng = np.random.default_rng(1)
    t = np.arange(64, dtype=np.int64) * round(1e9 / 30)
    shown, refs = {}, []
    for e in range(4):
        frames = moving_texture(64, 64, seed=e)
        frames[:16] = frames[0]
        frames = np.clip(frames.astype(np.int16) + rng.normal(0, 6, frames.shape), 0, 255).astype(np.uint8)
        frames[:16] = frames[0]  # at rest: one image, grain and all
        shown[e] = frames
        refs.append(client.segments.add("lab", f"rest-{e}", [rayform.ImageStream("cam/rgb", t, frames)]))
    s = client.slices.create(refs)
    pack = client.pack(s, 30, image_codec="h264", max_horizon=0, workers=1, progress=False)
    ds = rayform.torch.EpisodeDataset(s, obs=["cam/rgb"], fps=30, pack=pack.key)
    got, want = [], []
    for i in range(len(ds)):
        x = ds[i]
        got.append(x["cam/rgb"].numpy().transpose(1, 2, 0))
        want.append(shown[int(x["meta"]["episode_index"])][int(x["meta"]["frame_index"])])
    want_ = np.stack(want)
    jpeg = psnr(want_, np.stack([imagecodec.decode_jpeg(imagecodec.encode_jpeg(f, 90)) for f in want_]))
    assert psnr(np.stack(got), want_) >= jpeg - 1.5, pack.schema["cam/rgb"].video
