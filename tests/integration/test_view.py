"""``rayform view`` as a user runs it: its own process on loopback, read over HTTP. Its routes
answer what the store holds, refuse what is not a name with one message, serve a video's byte
ranges, write nothing, and stop on Ctrl-C without a traceback."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import ViewServer


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_routes_answer_what_the_store_holds(view_demo):
    server, client, s = view_demo
    sites = server.json("/api/sites")
    assert {x["site"]: x["segments"] for x in sites} == {"lab": 2, "cams": 3}
    page = server.json("/api/segments?site=cams&task=CUPS")
    assert [r["name"] for r in page["rows"]] == ["video-episode"] and page["total"] == 1
    video = page["rows"][0]
    summary = server.json(f"/api/segment/{video['id']}?version={video['version']}")
    assert summary["task"] == "stack the cups" and summary["streams"][0]["mp4"]
    status, headers, body = server.get(f"/api/segment/{video['id']}/video/cam/rgb")
    assert status == 200 and headers["Content-Type"] == "video/mp4" and headers["Accept-Ranges"] == "bytes"
    status, headers, part = server.get(f"/api/segment/{video['id']}/video/cam/rgb", {"Range": "bytes=100-199"})
    assert status == 206 and part == body[100:200] and headers["Content-Range"] == f"bytes 100-199/{len(body)}"
    status, _, _ = server.get(f"/api/segment/{video['id']}/video/cam/rgb", {"Range": f"bytes={len(body)}-"})
    assert status == 416
    assert [x["id"] for x in server.json("/api/slices")] == [s.id]
    key = server.json(f"/api/slice/{s.id}")["packs"][0]["key"]
    sample = server.json(f"/api/pack/{s.id}/{key}/sample/3")
    status, headers, image = server.get(f"/api/pack/{s.id}/{key}/sample/3/image/{sample['images'][0]}")
    assert status == 200 and headers["Content-Type"] == "image/jpeg" and image[:2] == b"\xff\xd8"


@pytest.mark.parametrize("path, status", [
    ("/api/segment/seg_nothex", 400),
    ("/api/segment/seg_000000000000", 404),
    ("/api/segment/seg_000000000000?version=../../etc", 400),
    ("/api/segments?where=duration%20%3E", 400),
    ("/api/segments?sort=size", 400),
    ("/api/segments?limit=100000", 400),
    ("/api/segment/seg_000000000000/series?from=3&to=1", 400),  # a zoom's window: from before to
    ("/api/segment/seg_000000000000/series?from=3", 400),
    ("/api/segment/seg_000000000000/series?from=nan&to=4", 400),
    ("/api/pack/small/..%2F..%2Fetc", 400),
    ("/api/pack/nosuchslice/fps15-00000000", 404),
    ("/static/../../../etc/passwd", 404),
    ("/static/view.py", 404),
])
def test_what_is_not_a_name_is_one_message(view_demo, path, status):
    server, _, _ = view_demo
    got, headers, body = server.get(path)
    assert got == status, body[:300]
    if path.startswith("/api/"):
        message = json.loads(body)["error"]
        assert message and "\n" not in message and "Traceback" not in message


def test_pages_are_read_only_and_fenced(view_demo):
    server, client, _ = view_demo
    before = _tree(Path(client.store.display))
    status, headers, body = server.get("/")
    assert status == 200 and b'<script type="module" src="/static/routes.js">' in body
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and headers["X-Content-Type-Options"] == "nosniff"
    for method in ("POST", "PUT", "DELETE"):
        assert server.get("/api/sites", method=method)[0] == 405
    for r in server.json("/api/segments")["rows"]:
        server.json(f"/api/segment/{r['id']}/series")
    assert _tree(Path(client.store.display)) == before  # nothing written by reading every page


def test_ctrl_c_stops_it_quietly(tmp_path, shared_demo):
    client, _ = shared_demo
    server = ViewServer(client.store.display)
    assert server.json("/api/sites")
    code, err = server.stop()
    assert code == 130 and "Traceback" not in err and "interrupted" in err, err


def test_a_store_that_is_not_there_is_one_line(tmp_path):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "rayform.cli.main", "view", "--store", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "no such directory" in run.stderr and "Traceback" not in run.stderr


def test_a_remote_store_is_read_through_the_cache(s3_demo, tmp_path):
    url, options, slice_id = s3_demo
    cache = tmp_path / "cache"
    server = ViewServer(url, *[arg for k, v in options.items() for arg in ("-o", f"{k}={v}")], "--cache", str(cache))
    try:
        assert {x["site"]: x["segments"] for x in server.json("/api/sites")} == {"lab": 2}
        row = server.json("/api/segments")["rows"][0]
        summary = server.json(f"/api/segment/{row['id']}?version={row['version']}")
        assert server.json(f"/api/segment/{row['id']}/series")
        camera = next(st for st in summary["streams"] if st["kind"] == "image")
        status, _, frame = server.get(f"/api/segment/{row['id']}/frame/{camera['name']}/0?version={row['version']}")
        assert status == 200 and frame[:2] == b"\xff\xd8"
        key = server.json(f"/api/slice/{slice_id}")["packs"][0]["key"]
        assert server.json(f"/api/pack/{slice_id}/{key}/sample/0")["meta"]["slice"] == slice_id
    finally:
        code, err = server.stop()
    assert code == 130 and "Traceback" not in err and "testing" not in err  # no credential said
    assert any(p.is_file() for p in cache.rglob("*"))  # what the pages read came through the cache


def test_the_loose_ends_a_range_of_nothing_the_routers_replies_and_no_path_in_errors(view_demo):
    server, client, _ = view_demo
    video = server.json("/api/segments?site=cams&task=CUPS")["rows"][0]
    status, headers, _ = server.get(f"/api/segment/{video['id']}/video/cam/rgb", {"Range": "bytes=-0"})
    assert status == 416 and headers["Content-Range"].startswith("bytes */")
    for path, method, want in (("/api/nothing/here", "GET", 404), ("/api/sites", "POST", 405)):
        got, headers, body = server.get(path, method=method)
        assert got == want and headers["X-Content-Type-Options"] == "nosniff" and "Content-Security-Policy" in headers
        assert json.loads(body)["error"]
    status, _, body = server.get("/api/segment/seg_000000000000")
    assert status == 404 and client.store.display not in body.decode() and str(Path(client.store.display).parent) \
        not in body.decode()


def test_concurrent_first_requests_for_a_video_remux_it_once(shared_demo, monkeypatch):
    import threading

    from rayform.view import episode
    from rayform.view.server import View

    client, _ = shared_demo
    from tests.conftest import recorded_video

    stream, _ = recorded_video(24)
    ref = client.segments.add("cams-once", "one-video", [stream])
    view = View(client)
    made = []
    real = episode.remux
    monkeypatch.setattr(episode, "remux", lambda seg, name: made.append(name) or real(seg, name))
    out: list[bytes] = []
    threads = [threading.Thread(target=lambda: out.append(view.episodes.mp4(ref.id, ref.version, "cam/rgb")))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len(out) == 8 and len(set(out)) == 1
