"""The parameters of a pack, and their validation."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rayform.codec.clip import MAX_SIDE
from rayform.codec.codecs import VIDEO_CODECS
from rayform.errors import InvalidInput
from rayform.pack import grid
from rayform.store.content import canonical_json, sha256_hex

CODECS = ("keep", "jpeg", "png", *VIDEO_CODECS)
CLIP_FRAMES = 8
# With history, a video clip holds this many samples, a keyframe every CLIP_FRAMES of them: the
# frames history reads before a sample are then mostly in its own clip, stored once (a clip of 8
# with 4 frames of history stores 12: 1.3-1.5x the bytes; of 64, 68 frames: 1.01-1.03x).
HISTORY_CLIP_FRAMES = 64
# /2: history and future instants from the grid step (``pack.grid``), no longer as offsets from
# a sample's own rounded instant (a nanosecond apart at 3, 15, 29.97 fps: other bytes). A /1
# pack's layout is the same and still reads.
PACK_FORMAT = "rayform.pack/2"
READABLE_FORMATS = ("rayform.pack/1", PACK_FORMAT)


MIN_FPS, MAX_FPS = 0.001, 10_000
MAX_HORIZON = 4096


def check_fps(fps: object, what: str = "fps") -> float:
    """A usable frame rate: a finite number in [0.001, 10000] (a bool or a string is not one)."""
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) \
            or not MIN_FPS <= fps <= MAX_FPS:
        raise InvalidInput(f"{what} {str(fps)[:40]}: must be a number in [{MIN_FPS:g}, {MAX_FPS:g}]")
    return float(fps)


@dataclass(frozen=True)
class PackSpec:
    """How a slice is rendered for training.

    ``image_codec``: ``"keep"`` stores recorded JPEG/PNG bytes untouched (raw frames become
    PNG, or npy for float depth); ``"jpeg"`` stores JPEG: recorded ones untouched, others
    encoded at ``jpeg_quality`` (with ``jpeg_reencode``, recorded ones too); ``"png"`` stores
    lossless; ``"h264"``, ``"av1"``, ``"hevc"`` encode every RGB camera as video: clips of
    ``clip_frames`` samples, each one closed group of pictures (``rayform.codec.clip``), at
    ``video_crf`` and ``video_preset`` (None: the codec's defaults, ``codec.video_encoder``),
    or at the largest CRF whose PSNR meets ``video_psnr`` dB on a sample of clips
    (``packer.quality``); the PSNR an encoded camera measures is recorded in its schema.
    Under ``keep`` a recorded video whose frames fall one per sample is copied packet for
    packet; any other is encoded as H.264 (the manifest's schema says why). A ``resize`` (H, W)
    always re-encodes (``keep`` then keeps the format).
    ``shard_bytes`` is a target: every shard but the last holds the same count of samples,
    chosen before rendering from the estimated tar size of a sample (``packer.estimate``),
    so shards come out about this size.
    ``staleness`` is the tolerance of time alignment in periods of each stream's own median
    rate: an image older than that, or an array gap wider than twice that, drops the instant.
    ``interleave_seed``: the samples of the whole slice are laid out in the order of a
    permutation seeded by it, so every shard is a uniform sample of the slice and a stream of
    shards is as mixed as random access (the default, seed 0); ``None`` keeps time order
    (segment after segment), as packs made before interleaving.
    ``snap``: a timestamp within this fraction of its stream's median period after an
    instant counts as at the instant (1%: 333 µs for a 30 Hz camera, 10 µs at 1 kHz; LeRobot
    uses a flat 100 µs), so frames stamped a hair off the grid are not taken for stale ones
    and a last step a nanosecond past the end is not padding; 0: exact, as packs made
    before it.
    ``max_history``: each sample also carries its streams at the grid steps ``k − j``, ``j = 1 …
    max_history`` (images as more members, arrays in the record), with a pad mask where
    that runs before the segment's first sample (whose values it then repeats): what
    observation history reads, without leaving the sample.
    ``clip_frames``: samples a video clip holds (0: 8, or 64 with ``max_history``);
    ``gop_frames``: samples from one keyframe to the next inside an encoded clip (None: the
    whole clip one group of pictures, as packs before it; with ``max_history`` and no clip
    length given, 8). A clip's first group also holds the frames its first sample's history
    shows, so history costs those few frames a clip, not a keyframe.
    """

    fps: float
    streams: tuple[str, ...] | None = None
    image_codec: str = "keep"
    jpeg_quality: int = 90
    resize: tuple[int, int] | None = None
    max_horizon: int = 16
    shard_bytes: int = 64 << 20
    staleness: float = 1.5
    interleave_seed: int | None = 0
    snap: float = 0.01
    max_history: int = 0
    clip_frames: int = 0  # 0 (or None): chosen, see above
    gop_frames: int | None = None
    video_crf: int | float | None = None
    video_preset: str | None = None
    video_psnr: float | None = None
    jpeg_reencode: bool = False
    samples_per_task: int = field(default=256, compare=False)

    def __post_init__(self) -> None:
        check_fps(self.fps)
        if self.image_codec not in CODECS:
            raise InvalidInput(f"image codec {self.image_codec!r}: one of {', '.join(CODECS)}")
        if self.clip_frames is None or (self.clip_frames == 0 and not isinstance(self.clip_frames, bool)):
            history_clips = self.max_history not in (0, None) and self.image_codec not in ("jpeg", "png")
            object.__setattr__(self, "clip_frames", HISTORY_CLIP_FRAMES if history_clips else CLIP_FRAMES)
            if history_clips and self.gop_frames is None:
                object.__setattr__(self, "gop_frames", CLIP_FRAMES)
        for name, value, lo, hi in (("JPEG quality", self.jpeg_quality, 1, 100),
                                    ("max horizon", self.max_horizon, 0, MAX_HORIZON),
                                    ("max history", self.max_history, 0, MAX_HORIZON),
                                    ("shard size", self.shard_bytes, 1 << 16, 1 << 40),
                                    ("clip frames", self.clip_frames, 1, 256),
                                    ("GOP frames", self.clip_frames if self.gop_frames is None else self.gop_frames,
                                     1, 256),
                                    ("samples per task", self.samples_per_task, 1, 1 << 20)):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidInput(f"{name} {str(value)[:40]!r}: must be an integer in [{lo}, {hi}]")
        if isinstance(self.staleness, bool) or not isinstance(self.staleness, (int, float)) \
                or not math.isfinite(self.staleness) or not 0 < self.staleness <= 1000:
            raise InvalidInput(f"staleness {str(self.staleness)[:40]!r}: must be a number in (0, 1000]")
        if isinstance(self.snap, bool) or not isinstance(self.snap, (int, float)) \
                or not math.isfinite(self.snap) or not 0 <= self.snap <= 0.5:
            raise InvalidInput(f"snap {str(self.snap)[:40]!r}: a fraction of a period in [0, 0.5]")
        if self.resize is not None:
            if not isinstance(self.resize, (tuple, list)) or len(self.resize) != 2 or not all(
                    isinstance(v, numbers.Integral) and not isinstance(v, bool) and 1 <= v <= MAX_SIDE
                    for v in self.resize):
                raise InvalidInput(f"resize {str(self.resize)[:40]}: must be (H, W), each 1..{MAX_SIDE}")
            object.__setattr__(self, "resize", tuple(int(v) for v in self.resize))
        if self.streams is not None:
            if isinstance(self.streams, str) or not all(isinstance(s, str) for s in self.streams):
                raise InvalidInput(f"streams {str(self.streams)[:80]}: must be a list of stream names")
            object.__setattr__(self, "streams", tuple(self.streams))
        seed = self.interleave_seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 63):
            raise InvalidInput(f"interleave seed {str(seed)[:40]!r}: a whole number in [0, 2**63), or None (time order)")
        if self.video_psnr is not None:
            if isinstance(self.video_psnr, bool) or not isinstance(self.video_psnr, (int, float)) \
                    or not 20 <= self.video_psnr <= 60:
                raise InvalidInput(f"video PSNR {str(self.video_psnr)[:40]!r}: a target in dB, 20..60 (JPEG q90 of "
                                   "camera frames measures about 38..44)")
            if self.video_crf is not None:
                raise InvalidInput("video: give a PSNR target or a CRF, not both (the target chooses the CRF)")
        if not isinstance(self.jpeg_reencode, bool):
            raise InvalidInput(f"jpeg_reencode {self.jpeg_reencode!r}: True or False")
        if self.gop_frames is not None and self.gop_frames >= self.clip_frames:
            object.__setattr__(self, "gop_frames", None)  # one group a clip: the same pack, the same key
        if self.video_crf is not None or self.video_preset is not None:
            from rayform.codec.video_encoder import VideoCodec

            checked = VideoCodec("h264" if self.image_codec not in VIDEO_CODECS else self.image_codec,
                                 self.video_crf, self.video_preset, self.keyframe_every)
            if self.video_crf is not None:
                object.__setattr__(self, "video_crf", checked.crf)  # 18.0 as 18: one pack, one key
        if float(self.fps).is_integer():
            object.__setattr__(self, "fps", int(self.fps))

    def to_manifest(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("samples_per_task")
        out["streams"] = list(self.streams) if self.streams is not None else None
        out["resize"] = list(self.resize) if self.resize is not None else None
        if self.interleave_seed is None:
            out.pop("interleave_seed")  # time order: as packs were before interleaving, same key
        if self.snap == 0:
            out.pop("snap")  # exact: as packs were before snapping, same key
        if self.max_history == 0:
            out.pop("max_history")  # no history: as packs were before it, same key
        for key, default in (("clip_frames", CLIP_FRAMES), ("gop_frames", None), ("video_crf", None), ("video_preset", None),
                             ("video_psnr", None), ("jpeg_reencode", False)):
            if out[key] == default:
                out.pop(key)  # as packs were before video, same key
        return out

    @classmethod
    def from_manifest(cls, m: dict[str, Any]) -> PackSpec:
        # a pack made before interleaving holds its samples in time order; one made before
        # snapping aligned exactly
        return cls(**{"interleave_seed": None, "snap": 0, "clip_frames": CLIP_FRAMES, **m})

    def beyond(self, history: int, horizon: int) -> tuple[str, str] | None:
        """Where a reader asking ``history`` steps back and ``horizon`` ahead goes beyond what a
        pack of these parameters holds: (what, the ``rayform pack`` flag that packs it), or None.
        The one check: the dataset's choice of pack and the sample builder both ask it."""
        if history > self.max_history:
            return f"a history {history} steps back is beyond its pack's {self.max_history}", f"--history {history}"
        if horizon > self.max_horizon:
            return f"horizon {horizon} is beyond the pack's maximum {self.max_horizon}", f"--horizon {horizon}"
        return None

    @property
    def keyframe_every(self) -> int:
        """Samples from one keyframe to the next in an encoded clip."""
        return self.gop_frames or self.clip_frames

    def group_frames(self, history: int | None = None) -> int:
        """The most frames from a keyframe to the next in an encoded clip: a clip's first group
        holds the frames its first sample's history shows (``history`` steps; None: the pack's)."""
        return self.keyframe_every + (self.max_history if history is None else history)

    def history_instants(self, origin: int, steps: np.ndarray) -> np.ndarray:
        """``(len(steps), max_history)``: the instants 1 … ``max_history`` grid steps before each
        sample at grid step ``steps`` on the grid whose step 0 is at ``origin`` (``pack.grid``)."""
        return grid.instants(origin, grid.around(steps, -self.max_history, -1)[:, ::-1], self.fps)

    def future_instants(self, origin: int, steps: np.ndarray) -> np.ndarray:
        """``(len(steps), max_horizon + 1)``: each sample's instant and the ``max_horizon`` after it."""
        return grid.instants(origin, grid.around(steps, 0, self.max_horizon), self.fps)

    def key(self) -> str:
        """A short, stable name for these parameters: ``fps15-<8 hex>``."""
        return f"fps{self.fps}-{sha256_hex(canonical_json([PACK_FORMAT, self.to_manifest()]))[:8]}"
