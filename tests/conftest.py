"""Shared fixtures: stores (local, memory, a real S3 endpoint and a plain HTTP server on
loopback) and demo slices."""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rayform
from rayform.converters.demo import DemoConfig, ingest_demo

REAL_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"
SMALL_DEMO = DemoConfig(episodes=2, seconds=3.0, seed=7, image_size=64)

# Credentials for the loopback endpoint only; set before any botocore client exists so
# that forked and spawned workers inherit them too.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory, monkeypatch):
    """No test reads the user's real store or cache, or inherits offline mode."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("RAYFORM_STORE", str(base / "default-store"))
    monkeypatch.setenv("RAYFORM_CACHE_DIR", str(base / "default-cache"))
    monkeypatch.delenv("RAYFORM_OFFLINE", raising=False)


logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request drowns a failure


_S3_ERRORS = {  # status -> (reason, S3 error code, message) as S3 answers
    403: ("Forbidden", "AccessDenied", "Access Denied"),
    503: ("Service Unavailable", "SlowDown", "Please reduce your request rate."),
}


class S3Endpoint:
    """moto's S3 app served on 127.0.0.1 by a real HTTP server, counting requests.

    A real server (not an in-process mock) is reached by forked and spawned workers too.
    """

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.requests: list[tuple[str, str]] = []
        self.ranges: list[tuple[str, str]] = []  # (path, Range header) of every ranged GET
        self.copies: list[str] = []  # paths of every PUT that copies an object (no upload of its bytes)
        self._failing: dict[str, list[int]] = {}  # path part -> [GETs left to fail, status, resumed only]
        self._throttle: tuple[str, int, int] | None = None  # (path part, refused, of every so many GETs)
        self._throttled_gets = 0
        self.refused = 0
        self._lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def counting(environ, start_response):
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            with self._lock:
                self.requests.append((method, path))
                if method == "GET" and environ.get("HTTP_RANGE"):
                    self.ranges.append((path, environ["HTTP_RANGE"]))
                if method == "PUT" and environ.get("HTTP_X_AMZ_COPY_SOURCE"):
                    self.copies.append(path)
                resumed = environ.get("HTTP_RANGE", "bytes=0-")[len("bytes="):].split("-")[0] not in ("", "0")
                failing = next((f for part, f in self._failing.items()
                                if part in path and f[0] > 0 and (resumed or not f[2])), None)
                if method == "GET" and failing:
                    failing[0] -= 1
                if method == "GET" and not failing and self._throttle and self._throttle[0] in path:
                    part, refuse, of = self._throttle
                    self._throttled_gets += 1
                    if (self._throttled_gets - 1) % of < refuse:  # the first `refuse` of every `of`: in bursts
                        self.refused += 1
                        failing = [0, 503, False]
            if method == "GET" and failing:
                reason, code, message = _S3_ERRORS.get(failing[1], _S3_ERRORS[503])
                start_response(f"{failing[1]} {reason}", [("Content-Type", "application/xml")])
                return [f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()]
            return app(environ, start_response)

        self._server = make_server("127.0.0.1", 0, counting, threaded=True)
        self.port = self._server.server_port
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def storage_options(self) -> dict:
        return {"endpoint_url": self.url, "key": "testing", "secret": "testing"}

    def bucket(self) -> str:
        import boto3

        name = f"rf-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=self.url, region_name="us-east-1").create_bucket(Bucket=name)
        return name

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.ranges.clear()
            self.copies.clear()

    def fail_gets(self, path_part: str, times: int, status: int = 503, resumed_only: bool = False) -> None:
        """The next ``times`` GETs of a path containing ``path_part`` (with ``resumed_only``:
        ranged from a byte past 0) answer ``status``."""
        with self._lock:
            self._failing[path_part] = [times, status, resumed_only]

    def throttle(self, path_part: str | None, refuse: int = 2, of: int = 3) -> None:
        """From now on the first ``refuse`` of every ``of`` GETs of paths containing ``path_part``
        answer 503 Slow Down, as S3 does under load (None: no more)."""
        with self._lock:
            self._throttle = (path_part, refuse, of) if path_part else None
            self._throttled_gets = self.refused = 0

    def failures_left(self, path_part: str) -> int:
        with self._lock:
            return self._failing.get(path_part, [0])[0]

    def count(self, method: str | None = None) -> int:
        with self._lock:
            return sum(1 for m, _ in self.requests if method is None or m == method)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    endpoint = S3Endpoint()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def s3_store_url(s3_endpoint) -> tuple[str, dict]:
    """A fresh bucket on the loopback endpoint: ``(url, storage_options)``."""
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()
    return f"s3://{s3_endpoint.bucket()}/store", s3_endpoint.storage_options


@pytest.fixture
def client(tmp_path) -> rayform.Client:
    return rayform.Client(tmp_path / "store")


@pytest.fixture
def demo_client(tmp_path) -> tuple[rayform.Client, rayform.Slice]:
    """A fresh local store holding the small demo, and its slice (safe to damage)."""
    c = rayform.Client(tmp_path / "store")
    refs = ingest_demo(c, "lab", SMALL_DEMO)
    return c, c.slices.create(refs, name="small")


@pytest.fixture
def packed_small(tmp_path) -> tuple[rayform.Client, rayform.Slice]:
    """A fresh local store with a tiny demo packed at 15 fps in 64 KiB shards (safe to damage)."""
    c = rayform.Client(tmp_path / "src")
    s = c.slices.create(ingest_demo(c, "lab", DemoConfig(episodes=2, seconds=2.0, image_size=32)), name="small")
    c.pack(s, 15, workers=1, progress=False, shard_bytes=1 << 16)
    return c, s


@pytest.fixture(scope="session")
def shared_demo(tmp_path_factory) -> tuple[rayform.Client, rayform.Slice]:
    """One small demo store for the whole session: read-only by convention."""
    c = rayform.Client(tmp_path_factory.mktemp("shared") / "store")
    refs = ingest_demo(c, "lab", SMALL_DEMO)
    return c, c.slices.create(refs, name="small")


@pytest.fixture
def real_data() -> Path:
    if not REAL_DATA.is_dir():
        pytest.skip(f"{REAL_DATA} is absent")
    return REAL_DATA


def moving_texture(frames: int, size: int = 64, seed: int = 0) -> np.ndarray:
    """``(frames, size, size, 3) uint8``: a smooth random texture (detail in brightness,
    colour varying slowly, as in a camera's view) drifting a pixel or two a frame, as a camera
    panning over a scene: what video coding is for, without real data."""
    rng = np.random.default_rng(seed)
    big = size * 3
    gray = np.kron(rng.random((big // 4 + 2, big // 4 + 2)), np.ones((4, 4)))[:big, :big]
    for _ in range(2):  # blocky, then smoothed
        gray = (gray + np.roll(gray, 1, 0) + np.roll(gray, 1, 1) + np.roll(gray, (1, 1), (0, 1))) / 4
    yy, xx = np.mgrid[0:big, 0:big] / big
    tint = np.stack([0.6 + 0.4 * np.sin(3 * xx + rng.random() * 6), 0.6 + 0.4 * np.cos(2 * yy),
                     0.6 + 0.4 * np.sin(2 * (xx + yy))], axis=-1)
    texture = (np.clip(gray[..., None] * tint * 1.2, 0, 1) * 255).astype(np.uint8)
    out = np.empty((frames, size, size, 3), np.uint8)
    for k in range(frames):
        y, x = (k * 2) % (big - size), (k * 3 // 2) % (big - size)
        out[k] = texture[y:y + size, x:x + size]
    return out


def segment_manifest(client: rayform.Client, segment: Any) -> dict:
    """A stored segment version's manifest as a dict (out of its bundle, or its loose blob)."""
    import json

    seg = client.segments.get(segment.id, segment.version)
    return json.loads(bytes(seg.bundle.get(seg.version))) if seg.bundle else client.store.get_json_blob(seg.version)


def recorded_video(frames: int = 12, lead: int = 0, size: int = 64, name: str = "cam/rgb",
                   seed: int = 0, crf: int | None = None,
                   codec: str = "h264") -> tuple[rayform.VideoStream, list[np.ndarray]]:
    """A camera's H.264 (or ``codec``: a keyframe every 4 frames, at ``crf``) as a recorder
    keeps it, and its frames as decoded; the first ``lead`` frames are a lead-in before the
    segment's first."""
    from rayform.codec.video import PyAVDecoder
    from rayform.codec.video_encoder import VideoCodec

    clip = VideoCodec(codec, crf, clip_frames=4).encode(moving_texture(frames, size, seed))
    decoded = PyAVDecoder().decode(clip, range(frames), None, "source")
    times = np.arange(frames, dtype=np.int64) * (1_000_000_000 // 30)
    stream = rayform.VideoStream(name, times[lead:], list(clip.packets), times,
                                 np.isin(np.arange(frames), clip.keys), codec, size, size, clip.extradata)
    return stream, [decoded[i] for i in range(lead, frames)]


def add_video_slice(client: rayform.Client, episodes: int = 3, frames: int = 48, size: int = 64, name: str = "video",
                    fps: int = 30) -> rayform.Slice:
    """``episodes`` of a camera (``cam/rgb``, raw frames of ``moving_texture``) and 6 joints
    (a random walk), at ``fps``."""
    refs = []
    for e in range(episodes):
        t = np.arange(frames, dtype=np.int64) * round(1e9 / fps)
        joints = np.cumsum(np.random.default_rng(e).normal(0, 0.01, (frames, 6)), axis=0).astype(np.float32)
        refs.append(client.segments.add("lab", f"episode-{e}", [
            rayform.ImageStream("cam/rgb", t, moving_texture(frames, size, seed=e)),
            rayform.ArrayStream("joints", t, joints)]))
    return client.slices.create(refs, name=name)


@pytest.fixture(scope="session")
def video_packs(tmp_path_factory) -> tuple[rayform.Client, rayform.Slice, rayform.Pack, rayform.Pack]:
    """A textured slice packed twice at 30 fps, history 2, horizon 8: as JPEG q90 and as H.264
    (clips of 8, each one group of pictures holding its history: as packs were before history
    clips, and as ``--clip-frames 8`` makes them). Read-only by convention."""
    client = rayform.Client(tmp_path_factory.mktemp("video") / "store")
    s = add_video_slice(client)
    jpeg = client.pack(s, 30, image_codec="jpeg", max_history=2, max_horizon=8, workers=1, progress=False)
    h264 = client.pack(s, 30, image_codec="h264", max_history=2, max_horizon=8, clip_frames=8, workers=1,
                       progress=False)
    return client, s, jpeg, h264


@pytest.fixture(scope="session")
def history_clip_packs(tmp_path_factory) -> tuple[rayform.Client, rayform.Slice, rayform.Pack, rayform.Pack]:
    """Three textured episodes of 150 frames packed as H.264 at 30 fps, horizon 8: with history
    4 as packs make it by default (clips of 64 samples, a keyframe every 8, the history before a
    clip in its first group), and without history (clips of 8). Read-only by convention."""
    client = rayform.Client(tmp_path_factory.mktemp("history-clips") / "store")
    s = add_video_slice(client, frames=150, name="long-video")
    history = client.pack(s, 30, image_codec="h264", max_history=4, max_horizon=8, workers=1, progress=False)
    plain = client.pack(s, 30, image_codec="h264", max_horizon=8, workers=1, progress=False)
    return client, s, history, plain


@pytest.fixture(scope="session")
def history_jpeg_pack(history_clip_packs) -> rayform.Pack:
    """``history_clip_packs``' slice packed as JPEG q90 with history 4: the samples to compare with."""
    client, s, _, _ = history_clip_packs
    return client.pack(s, 30, image_codec="jpeg", max_history=4, max_horizon=8, workers=1, progress=False)


@pytest.fixture(scope="session")
def s3_demo(s3_endpoint, tmp_path_factory) -> tuple[str, dict, str]:
    """The small demo packed at 15 fps in a bucket on the loopback endpoint: (url, options, slice id).

    Read-only by convention; each test brings its own cache directory.
    """
    url = f"s3://{s3_endpoint.bucket()}/store"
    options = s3_endpoint.storage_options
    client = rayform.Client(url, storage_options=options, cache=tmp_path_factory.mktemp("writer-cache"))
    s = client.slices.create(ingest_demo(client, "lab", SMALL_DEMO), name="small")
    # 16 KiB chunks: each small shard is verified in ten or so chunks as it streams
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rayform.packer.tar_writer.CHUNK_BYTES", 16 << 10)
        client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    return url, options, s.id


def snippet(text: str, **subs: str) -> str:
    """A product-page snippet, verbatim but for the substitutions asked."""
    for old, new in subs.items():
        text = text.replace(old, new)
    return text


class HttpStoreServer:
    """A directory served over plain HTTP on 127.0.0.1 with Range requests, as a static file
    server or CDN serves a store; it logs (method, path, Range header) of every request."""

    def __init__(self, root: Path) -> None:
        import functools
        import http.server

        log, lock = [], threading.Lock()
        self.requests, self._lock = log, lock

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def send_head(self):
                with lock:
                    log.append((self.command, self.path, self.headers.get("Range")))
                path, spec = self.translate_path(self.path), self.headers.get("Range")
                if not spec or not os.path.isfile(path):
                    return super().send_head()
                size = os.path.getsize(path)
                first, _, last = spec.removeprefix("bytes=").partition("-")
                start, end = int(first), min(int(last) if last else size - 1, size - 1)
                if start >= size:
                    self.send_error(416)
                    return None
                f = open(path, "rb")
                f.seek(start)
                self.send_response(206)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.send_header("Content-Length", str(end - start + 1))
                self.end_headers()
                return _Limited(f, end - start + 1)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def blob_gets(self) -> list[tuple[str, str | None]]:
        with self._lock:
            return [(path, spec) for method, path, spec in self.requests if method == "GET" and "/blobs/" in path]

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Limited:
    """The first ``n`` bytes of an open file (what copyfile reads for a 206)."""

    def __init__(self, f, n: int) -> None:
        self._f, self._n = f, n

    def read(self, k: int = -1) -> bytes:
        data = self._f.read(self._n if k < 0 else min(k, self._n))
        self._n -= len(data)
        return data

    def close(self) -> None:
        self._f.close()


@pytest.fixture(scope="session")
def http_demo(tmp_path_factory) -> Iterator[tuple[HttpStoreServer, str, str]]:
    """The small demo packed at 15 fps in a local store served over HTTP on loopback:
    (server, store url, slice id). Read-only by convention."""
    root = tmp_path_factory.mktemp("http")
    client = rayform.Client(root / "store")
    s = client.slices.create(ingest_demo(client, "lab", SMALL_DEMO), name="small")
    client.pack(s, 15, workers=1, progress=False, shard_bytes=150_000)
    server = HttpStoreServer(root)
    yield server, f"{server.url}/store", s.id
    server.stop()


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 to a loopback server (S3, HTTP) that cuts responses mid-body.

    The first ``cuts`` responses larger than ``after`` bytes are cut off after ``after``
    bytes (the connection is closed), as a flaky network or a dying server does.
    """

    def __init__(self, target_port: int, after: int, cuts: int):
        import socket

        self.after, self.cuts_left, self.cut = after, cuts, 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._target = target_port
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self._stop:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src, dst, downstream: bool) -> None:
        import socket

        sent = 0
        try:
            while data := src.recv(65536):
                if downstream:
                    with self._lock:
                        cut = self.cuts_left > 0 and sent + len(data) > self.after
                        if cut:
                            self.cuts_left -= 1
                            self.cut += 1
                    if cut:
                        dst.sendall(data[: max(0, self.after - sent)])
                        break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:  # shutdown first: close() alone leaves the peer waiting while the other pipe reads
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop = True
        self._sock.close()


class ViewServer:
    """``rayform view`` of a store, run as a user runs it (its own process, port 0), and its URL."""

    def __init__(self, store: Path | str, *extra: str):
        import subprocess
        import sys

        self.process = subprocess.Popen([sys.executable, "-m", "rayform.cli.main", "view", "--store", str(store),
                                         "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if "http://" not in line:
            self.process.kill()
            raise AssertionError(f"rayform view did not start: {line!r} {self.process.stderr.read()!r}")
        self.url = line[line.index("http://"):].split()[0].rstrip("/")

    def get(self, path: str, headers: dict[str, str] | None = None, method: str = "GET") -> tuple[int, Any, bytes]:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.url + path, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def json(self, path: str) -> Any:
        import json

        status, _, body = self.get(path)
        assert status == 200, (path, status, body[:300])
        return json.loads(body)

    def stop(self) -> tuple[int, str]:
        """Ctrl-C, as a user stops it: its exit code and what it printed on stderr."""
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=20)
        except Exception:
            self.process.kill()
            raise
        assert self.process.stderr is not None
        return code, self.process.stderr.read()


@pytest.fixture(scope="session")
def view_demo(tmp_path_factory) -> Iterator[tuple[ViewServer, rayform.Client, rayform.Slice]]:
    """``rayform view`` of a store holding the small demo packed at 15 fps, a recorded H.264
    camera beside joints, and a segment whose name, task and metadata are HTML (hostile
    text the pages must show as text). Read-only by convention."""
    root = tmp_path_factory.mktemp("view")
    client = rayform.Client(root / "store")
    s = client.slices.create(ingest_demo(client, "lab", SMALL_DEMO), name="small")
    client.pack(s, 15, workers=1, progress=False)
    stream, _ = recorded_video(frames=90, lead=3, size=64)  # a lead-in: the MP4 starts 0.1 s before the frames
    t = stream.timestamps
    wave = np.stack([np.sin(t / 1e9 * 3), np.cos(t / 1e9 * 2)], axis=1).astype(np.float32)
    client.segments.add("cams", "video-episode", [stream, rayform.ArrayStream("joints", t, wave)],
                        {"task": "stack the cups"})
    hevc, _ = recorded_video(frames=30, size=64, codec="hevc")  # a codec Chromium does not play
    client.segments.add("cams", "hevc-episode", [hevc])
    hostile = '<img src=x onerror="window.__pwned=1">'
    client.segments.add("cams", hostile, [rayform.ArrayStream("joints", t, wave)],
                        {"task": f"<script>window.__pwned=2</script>{hostile}", hostile: hostile})
    server = ViewServer(root / "store")
    yield server, client, s
    server.stop()


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory):
    """24 short episodes packed into one shard, as H.264 and as JPEG: the case where an epoch's
    order is the shard's own file order, so only the windows can change it."""
    client = rayform.Client(tmp_path_factory.mktemp("one-shard") / "store")
    s = add_video_slice(client, episodes=24, frames=40, size=16, name="many")
    packs = {codec: client.pack(s, 30, image_codec=codec, max_horizon=2, workers=1, progress=False)
             for codec in ("h264", "jpeg")}
    assert all(len(p.shards) == 1 for p in packs.values())
    return s, packs
