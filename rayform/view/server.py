"""``rayform view``: a read-only web server (aiohttp) on loopback that shows a store in a
browser. The pages are static files (``view/static``); everything they show comes from the
JSON and media routes below, read through the client's cache:

    GET /api/sites                                  sites, with segments and hours
    GET /api/segments?site&task&min&max&where&flagged&sort&desc&offset&limit
    GET /api/segment/{id}[?version]                 streams, task, metadata, frame times
    GET /api/segment/{id}/series[?version&from&to]  every array and pose stream, to plot (from..to s: zoomed)
    GET /api/segment/{id}/frame/{stream}/{i}        a camera's frame (as recorded where it can)
    GET /api/segment/{id}/video/{stream}            a recorded video remuxed to MP4 (ranges served)
    GET /api/slices, /api/slice/{id}                slices; a slice's segments and packs
    GET /api/pack/{slice}/{key}                     a pack: spec, codec, statistics
    GET /api/pack/{slice}/{key}/sample/{i}[/image/{stream}]

The store is untrusted: every name a request or the store gives is checked where it is used
(``names``, ``Segments.get``), the pages put text in with ``textContent`` only, and a
Content-Security-Policy lets a page run no script but its own. A user error is a 4xx with a
one-line message the page shows; nothing is ever written.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

from rayform import names
from rayform.client import Client
from rayform.errors import InvalidInput, Malformed, NotFound, RayformError, StreamNotFound
from rayform.recordings.segment_writer import check_site
from rayform.view.episode import Episodes
from rayform.view.pack_page import PackPages
from rayform.view.segment_table import Filter, SegmentTable

log = logging.getLogger("rayform")

# the pages: ES modules (routes.js the entry: its route table imports a module per page, each
# the DOM helper, the formats and the one plotting module), no build step
STATIC = ("index.html", "view.css", "routes.js", "dom.js", "format.js", "plot.js", "home.js", "segments.js",
          "slice.js", "episode.js", "pack.js")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; media-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_TYPES = {"html": "text/html; charset=utf-8", "js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}

Handler = Callable[[Any], Awaitable[Any]]


class View:
    """The pages' data, from one client; blocking reads run on a few threads."""

    def __init__(self, client: Client, threads: int = 4):
        self.client = client
        self.table = SegmentTable(client.segments.catalog)
        self.episodes = Episodes(client.segments, self.table.latest, self.table.findings)
        self.packs = PackPages(client.store, client.segments)
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="rayform-view")

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn, *args)


def make_app(client: Client) -> Any:
    """The aiohttp application serving ``client``'s store."""
    from aiohttp import web

    view = View(client)
    app = web.Application(middlewares=[_headers, _errors])
    app["view"] = view
    app["store_path"] = str(client.store.root) if client.store.is_local else None
    r = app.router
    r.add_get("/", _static("index.html"))
    for name in STATIC:
        r.add_get(f"/static/{name}", _static(name))
    r.add_get("/api/sites", _json(view.table.sites))
    r.add_get("/api/segments", _json(view.table.page, _filter, _offset, _limit))
    r.add_get("/api/segment/{id}", _json(view.episodes.summary, _segment, _version))
    r.add_get("/api/segment/{id}/series", _json(view.episodes.series, _segment, _version, _window))
    r.add_get("/api/segment/{id}/frame/{stream:.+}/{index:\\d+}",
              _media(view.episodes.frame, _segment, _version, _stream, _index))
    r.add_get("/api/segment/{id}/video/{stream:.+}", _media(view.episodes.mp4, _segment, _version, _stream, kind="video/mp4"))
    r.add_get("/api/slices", _json(view.packs.slice_list))
    r.add_get("/api/slice/{slice}", _json(view.packs.slice_page, _slice))
    r.add_get("/api/pack/{slice}/{key}", _json(view.packs.pack_page, _slice, _key))
    r.add_get("/api/pack/{slice}/{key}/sample/{index:\\d+}", _json(view.packs.sample, _slice, _key, _index))
    r.add_get("/api/pack/{slice}/{key}/sample/{index:\\d+}/image/{stream:.+}",
              _media(view.packs.sample_image, _slice, _key, _index, _stream, kind="image/jpeg"))
    app.on_cleanup.append(_shutdown)
    return app


async def _shutdown(app: Any) -> None:
    app["view"].pool.shutdown(wait=False, cancel_futures=True)


def serve(client: Client, host: str = "127.0.0.1", port: int = 0,
          ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted; ``ready`` is told the URL once the socket listens."""
    from aiohttp import web

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1, opened to mux AV1 (episode.remux), says only errors
    if not _loopback(host):
        log.warning("rayform view: serving %s beyond this machine (%s); anyone who reaches it reads the store",
                    client.store.display, host)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        raise InvalidInput(f"rayform view: cannot listen on {host}:{port} ({e.strerror}); try --port 0") from None
    sock.listen(128)  # from here a browser's connection waits for the app, never refused
    bound = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}/"
    if ready is not None:
        ready(url)
    web.run_app(make_app(client), sock=sock, print=None, handle_signals=True, access_log=None)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


# --- routes ----------------------------------------------------------------------------------

def _static(name: str) -> Handler:
    from aiohttp import web

    data = resources.files("rayform.view").joinpath(f"static/{name}").read_bytes()
    kind = _TYPES[name.rsplit(".", 1)[1]]

    async def handler(_: Any) -> Any:
        return web.Response(body=data, content_type=kind.split(";")[0], charset="utf-8")

    return handler


Reader = Callable[[Any], Any]  # what a route's function is given, read off the request and checked


def _json(fn: Callable[..., Any], *readers: Reader) -> Handler:
    """A route answering ``fn(*(reader(request) for reader in readers))`` as JSON."""
    from aiohttp import web

    async def handler(request: Any) -> Any:
        view: View = request.app["view"]
        result = await view.run(fn, *(read(request) for read in readers))
        return web.Response(text=_json_text(result), content_type="application/json")

    return handler


def _json_text(value: Any) -> str:
    """JSON as a browser parses it: a number that is not finite (a NaN in a segment's
    metadata) as null."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _media(fn: Callable[..., Any], *readers: Reader, kind: str | None = None) -> Handler:
    """A route answering the bytes ``fn`` gives, of media type ``kind`` (None: ``fn`` gives
    ``(bytes, type)``), by ranges where asked. What it names is one version of immutable
    content, so the browser may keep it."""

    async def handler(request: Any) -> Any:
        view: View = request.app["view"]
        result = await view.run(fn, *(read(request) for read in readers))
        data, media = result if kind is None else (result, kind)
        response = _ranged(request, data, media)
        response.headers["Cache-Control"] = "private, max-age=3600"
        return response

    return handler


def _ranged(request: Any, data: bytes, kind: str) -> Any:
    """``data`` whole, or the one byte range asked (a browser's video element seeks by ranges)."""
    from aiohttp import web

    if request.headers.get("Range", "").replace(" ", "").rstrip("0") == "bytes=-":  # the last 0 bytes: none
        return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
    try:
        asked = request.http_range
    except ValueError:
        asked = slice(None)
    if asked.start is None and asked.stop is None:
        return web.Response(body=data, content_type=kind, headers={"Accept-Ranges": "bytes"})
    start, stop, _ = asked.indices(len(data))
    if start >= len(data) or stop <= start:
        return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
    return web.Response(body=data[start:stop], status=206, content_type=kind,
                        headers={"Accept-Ranges": "bytes", "Content-Range": f"bytes {start}-{stop - 1}/{len(data)}"})


# --- what a request names, checked -------------------------------------------------------------

def _segment(request: Any) -> str:
    return names.segment_id(request.match_info["id"], "the segment in the address", trusted=True)


def _version(request: Any) -> str | None:
    v = request.query.get("version")
    return None if not v else names.digest(v, "version in the address", trusted=True)


def _stream(request: Any) -> str:
    return str(request.match_info["stream"])  # looked up among the segment's or pack's streams


def _index(request: Any) -> int:
    return int(request.match_info["index"])  # digits, by the route


def _slice(request: Any) -> str:
    value = str(request.match_info["slice"])
    if not names.SLICE_ID.fullmatch(value) and len(value) > 200:
        raise InvalidInput("a slice name of more than 200 characters")
    return value  # an id, or a name Slices.get looks up among the names it lists


def _key(request: Any) -> str:
    key = str(request.match_info["key"])
    if not names.PACK_KEY.fullmatch(key):
        raise InvalidInput(f"{key[:40]!r} is not a pack key (fps15-129e34cc)")
    return key


def _number(request: Any, name: str, kind: type, what: str) -> Any:
    """Query parameter ``name`` as a ``kind`` (None where it is absent or empty)."""
    text = request.query.get(name)
    if text is None or text == "":
        return None
    try:
        return kind(text)
    except ValueError:
        raise InvalidInput(f"{name}={text[:20]!r}: {what}") from None


def _window(request: Any) -> tuple[float, float] | None:
    """``from`` and ``to``: seconds of an episode to plot (a zoom), both or neither."""
    lo, hi = (_number(request, k, float, "a number of seconds") for k in ("from", "to"))
    if lo is None and hi is None:
        return None
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        raise InvalidInput("from and to: seconds of the episode, from before to (both, or neither)")
    return float(lo), float(hi)


def _offset(request: Any) -> int:
    found = _number(request, "offset", int, "a whole number")
    return 0 if found is None else int(found)


def _limit(request: Any) -> int:
    found = _number(request, "limit", int, "a whole number")
    return 50 if found is None else int(found)


def _filter(request: Any) -> Filter:
    q = request.query
    site = q.get("site") or None
    seconds = "a number of seconds"
    return Filter(site=check_site(site) if site else None, task=q.get("task", ""),
                  min_duration=_number(request, "min", float, seconds), max_duration=_number(request, "max", float, seconds),
                  where=q.get("where", ""), sort=q.get("sort", "recorded"), descending=q.get("desc", "") in ("1", "true"),
                  flagged=q.get("flagged", "") in ("1", "true"))


# --- middlewares -------------------------------------------------------------------------------

def _middleware(fn: Callable[[Any, Handler], Awaitable[Any]]) -> Any:
    from aiohttp import web

    return web.middleware(fn)


@_middleware
async def _errors(request: Any, handler: Handler) -> Any:
    """A rayform error as a JSON message and a status; nothing else leaves the server but a 500
    with the error's type (the traceback goes to the log)."""
    from aiohttp import web

    hidden = request.app.get("store_path") or "\0"  # a message names the store, never where it lies
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _error(e.status, e.reason)  # the router's own 404 and 405: a reply like any other, headers and all
    except (NotFound, StreamNotFound) as e:
        return _error(404, str(e).replace(hidden, "the store"))
    except (InvalidInput, Malformed, RayformError) as e:
        status = 422 if isinstance(e, Malformed) else 400
        return _error(status, str(e).replace(hidden, "the store"))
    except Exception as e:
        log.exception("rayform view: %s failed", request.path)
        return _error(500, f"{type(e).__name__} while reading {request.path} (the server's log has the details)")


@_middleware
async def _headers(request: Any, handler: Handler) -> Any:
    response = await handler(request)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def _error(status: int, message: str) -> Any:
    from aiohttp import web

    return web.Response(status=status, text=json.dumps({"error": message}), content_type="application/json")
