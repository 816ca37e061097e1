"""``rayform view``'s pages in a real browser: headless Chromium (Debian's ``chromium``) driven
by Playwright. Each page of a demo store loads; a recorded video plays for a second with the
clock and the plot cursor following it; a frame is stepped; the segment list filters, sorts
and pages over 1,000 segments; text from the store stays text. Skipped, saying why, where
Chromium or Playwright is absent (`.ci/run` installs Chromium where it can)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rayform
from tests.conftest import ViewServer

CHROMIUM = os.environ.get("RAYFORM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
# As the machine's notes say: no background connections (the network is closed), no sandbox as root
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--autoplay-policy=no-user-gesture-required"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium); the browser tests need one")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the test extra's playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser) -> Iterator[Any]:
    # bypass_csp: Playwright's waits evaluate strings, which the pages' policy refuses; the
    # store's text must then stay text by the pages' escaping alone (the policy is checked
    # in test_view.py)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)
    p = context.new_page()
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.errors = errors
    yield p
    context.close()


def _open(page: Any, server: ViewServer, hash_: str, ready: str) -> None:
    page.goto(f"{server.url}/#{hash_}")
    page.wait_for_selector(ready, timeout=30_000)


def _row(server: ViewServer, name: str) -> dict:
    return next(r for r in server.json("/api/segments?limit=500")["rows"] if r["name"] == name)


def test_home_lists_sites_and_slices_and_leads_to_a_site(page, view_demo):
    server, _, s = view_demo
    _open(page, server, "/", "#sites")
    assert page.locator("#sites tr.row").count() == 2 and page.locator("#slices tr.row").count() == 1
    page.click("#sites a:text('lab')")
    page.wait_for_selector("#segments tr.row")
    assert page.locator("#segments tr.row").count() == 2 and "of 2" in page.inner_text("#count")
    assert not page.errors, page.errors


def test_a_recorded_video_plays_in_sync_and_steps_a_frame(page, view_demo):
    server, _, _ = view_demo
    row = _row(server, "video-episode")
    _open(page, server, f"/segment/{row['id']}?version={row['version']}", "video[data-camera='cam/rgb']")
    page.wait_for_function("document.querySelector('video').readyState >= 2", timeout=30_000)
    cursor = page.get_attribute("canvas[data-stream='joints']", "data-cursor-x")
    page.click("#play")
    page.wait_for_timeout(1000)
    page.click("#play")  # pause
    t = float(page.get_attribute("#time", "data-t"))
    video_time = page.evaluate("document.querySelector('video').currentTime")
    assert 0.4 < t < 2.5 and video_time > 0.3  # a second of play moved the clock and the video
    assert float(page.get_attribute("canvas[data-stream='joints']", "data-cursor-x")) > float(cursor) + 10
    frame = int(page.get_attribute(".camera", "data-frame"))
    page.keyboard.press("ArrowRight")
    page.wait_for_function(f"document.querySelector('.camera').dataset.frame === '{frame + 1}'")
    stepped = float(page.get_attribute("#time", "data-t"))
    assert abs(stepped - (frame + 1) / 30) < 1e-3  # on the next frame's own time
    # the video on that frame too: its time counts from its lead-in's first packet
    lead = server.json(f"/api/segment/{row['id']}")["streams"][0]["mp4_start"]
    assert lead == pytest.approx(-0.1, abs=1e-3)
    page.wait_for_function(f"Math.abs(document.querySelector('video').currentTime - {stepped - lead}) < 1 / 30")
    # a plot's legend hides an element and shows it again
    drawn = "document.querySelector(\"canvas[data-stream='joints']\").toDataURL()"
    before = page.evaluate(drawn)
    page.click(".legend span[data-element='1']")
    assert page.evaluate(drawn) != before and "off" in page.get_attribute(".legend span[data-element='1']", "class")
    page.click(".legend span[data-element='1']")
    assert page.evaluate(drawn) == before
    assert not page.errors, page.errors


def test_recorded_jpegs_play_frame_by_frame(page, view_demo):
    server, _, _ = view_demo
    row = _row(server, "episode_0000")
    _open(page, server, f"/segment/{row['id']}", "img[data-camera='cam0/rgb']")
    page.wait_for_function("document.querySelector(\"img[data-camera='cam0/rgb']\").naturalWidth > 0")
    first = page.get_attribute("img[data-camera='cam0/rgb']", "src")
    page.keyboard.press(" ")
    page.wait_for_timeout(800)
    page.keyboard.press(" ")
    assert float(page.get_attribute("#time", "data-t")) > 0.3
    assert page.get_attribute("img[data-camera='cam0/rgb']", "src") != first
    assert not page.errors, page.errors


def test_a_video_the_browser_cannot_play_is_shown_frame_by_frame(page, view_demo):
    server, _, _ = view_demo
    row = _row(server, "hevc-episode")
    _open(page, server, f"/segment/{row['id']}", "[data-camera='cam/rgb']")
    if page.evaluate("document.createElement('video').canPlayType('video/mp4; codecs=\"hvc1.1.6.L120.90\"')"):
        pytest.skip("this Chromium plays HEVC: the frame-by-frame fallback is not reached")
    assert page.evaluate("document.querySelector(\"[data-camera='cam/rgb']\").tagName") == "IMG"
    page.wait_for_function("document.querySelector(\"img[data-camera='cam/rgb']\").naturalWidth === 64")
    page.keyboard.press("End")  # the last frame, decoded by the server from its keyframe
    page.wait_for_function("document.querySelector('.camera').dataset.frame === '29'")
    page.wait_for_function("document.querySelector(\"img[data-camera='cam/rgb']\").src.includes('/29')")
    page.wait_for_function("document.querySelector(\"img[data-camera='cam/rgb']\").complete")
    assert page.evaluate("document.querySelector(\"img[data-camera='cam/rgb']\").naturalWidth") == 64
    assert not page.errors, page.errors


def test_a_pack_page_shows_samples_and_statistics(page, view_demo):
    server, _, s = view_demo
    key = server.json(f"/api/slice/{s.id}")["packs"][0]["key"]
    _open(page, server, f"/pack/{s.id}/{key}?sample=4", "#sample-meta")
    page.wait_for_function("[...document.querySelectorAll('.camera img')].every(i => i.naturalWidth > 0)")
    assert page.locator("canvas[data-chunk]").count() == 2 and page.locator("canvas[data-stats]").count() >= 2
    assert "reads this pack by default" in page.inner_text("#pack-default")
    page.click("#next-sample")
    page.wait_for_function("location.hash.endsWith('sample=5')")
    page.wait_for_selector("text=Sample 5")
    assert not page.errors, page.errors


def test_text_from_the_store_stays_text(page, view_demo):
    server, _, _ = view_demo
    hostile = '<img src=x onerror="window.__pwned=1">'
    _open(page, server, "/segments?site=cams", "#segments tr.row")
    assert hostile in page.inner_text("#segments")
    row = _row(server, hostile)
    _open(page, server, f"/segment/{row['id']}", "#title")
    assert page.inner_text("#title") == hostile and "<script>" in page.inner_text("#task")
    assert hostile in page.inner_text("#meta")
    assert page.evaluate("window.__pwned") is None and page.locator("#main img[src=x]").count() == 0


@pytest.fixture(scope="module")
def thousand(tmp_path_factory) -> Iterator[tuple[ViewServer, list[str]]]:
    """1,000 segments at one site, three of them broken: one lacks its camera's stream, one
    ends after 0.2 s, one says it failed."""
    client = rayform.Client(tmp_path_factory.mktemp("thousand") / "store")
    added = []
    for i in range(1000):
        seconds = 0.2 if i == 517 else 5 + (i % 7)
        t = np.arange(int(seconds * 10) + 1, dtype=np.int64) * 100_000_000
        streams = [rayform.ArrayStream("joints", t, np.zeros((len(t), 3), np.float32))]
        if i != 303:
            streams.append(rayform.ArrayStream("cam/exposure", t, np.ones((len(t), 1), np.float32)))
        added.append(("farm", f"ep-{i:04d}", streams, {"task": "sort parts", "success": i != 808}))
    client.segments.add_many(added)
    server = ViewServer(client.store.display)
    yield server, ["ep-0303", "ep-0517", "ep-0808"]
    server.stop()


def test_a_broken_episode_is_found_among_a_thousand(page, thousand):
    server, broken = thousand
    _open(page, server, "/segments", "#segments tr.row")
    assert "1–50 of 1000" in page.inner_text("#count") and page.locator("#segments tr.row").count() == 50
    # the one missing its site's usual stream is flagged on its page of the list
    _open(page, server, "/segments?sort=name&offset=300", "#segments tr.row")
    flagged = page.locator("#segments td.missing")
    assert flagged.count() == 1 and "no cam/exposure" in flagged.inner_text()
    # the shortest, by sorting the duration column (twice: descending, then ascending)
    page.click("th[data-sort='duration']")
    page.wait_for_selector("th.sorted[data-sort='duration']")
    first = page.locator("#segments tr.row").first.get_attribute("data-id")
    assert page.locator("#segments tr.row td a").first.inner_text() == broken[1], first
    # the failed one, by a query on its metadata
    page.fill("input[name=where]", "meta.success == false")
    page.click("#filters button")
    page.wait_for_function("(document.querySelector('#count') || {}).textContent === '1–1 of 1'")
    assert page.locator("#segments tr.row td a").first.inner_text() == broken[2]
    page.locator("#segments tr.row td a").first.click()
    page.wait_for_selector("#title")
    assert page.inner_text("#title") == broken[2]


def test_an_episode_page_draws(page, view_demo, tmp_path):
    """The episode page's picture (the README's, docs/view-episode.png, is of the real G1
    recording in ../shared/data/real, taken the same way)."""
    server, _, _ = view_demo
    row = _row(server, "video-episode")
    _open(page, server, f"/segment/{row['id']}", "video[data-camera='cam/rgb']")
    page.wait_for_function("document.querySelector('video').readyState >= 2")
    page.keyboard.press("ArrowRight")
    out = tmp_path / "episode.png"
    page.screenshot(path=str(out))
    assert out.stat().st_size > 10_000


@pytest.fixture(scope="module")
def planted_view(tmp_path_factory) -> Iterator[tuple[ViewServer, dict[str, str]]]:
    """200 episodes of 6 joints moving, three with a planted defect: a spike, a joint stuck, a
    second of samples lost."""
    client = rayform.Client(tmp_path_factory.mktemp("planted") / "store")
    rng = np.random.default_rng(0)
    added, planted = [], {"ep-050": "spike", "ep-120": "constant", "ep-170": "gap"}
    for i in range(200):
        t = np.arange(60, dtype=np.int64) * 100_000_000
        q = np.cumsum(rng.normal(0, 0.02, (60, 6)), axis=0).astype(np.float32)
        if i == 50:
            q[30:32, 1] = 1e6
        if i == 120:
            q[:, 2] = 0.25
        if i == 170:
            t, q = np.delete(t, np.s_[20:32]), np.delete(q, np.s_[20:32], axis=0)
        added.append(("farm", f"ep-{i:03d}", [rayform.ArrayStream("joints", t, q)], {"task": "sort parts"}))
    client.segments.add_many(added)
    server = ViewServer(client.store.display)
    yield server, planted
    server.stop()


def test_the_flagged_filter_reaches_each_planted_episode_and_its_page_marks_the_time(page, planted_view):
    server, planted = planted_view
    _open(page, server, "/segments", "#segments tr.row")
    page.check("#flagged-only")
    page.click("#filters button")
    page.wait_for_function("(document.querySelector('#count') || {}).textContent === '1–3 of 3'")
    rows = page.locator("#segments tr.row")
    listed = {rows.nth(k).locator("td a").inner_text(): rows.nth(k).locator("td.flags").inner_text()
              for k in range(rows.count())}
    assert {name: flags.split(", ")[-1] for name, flags in listed.items()} == planted  # the gap drops frames too
    for name, kind in planted.items():
        page.locator("#segments tr.row td a", has_text=name).click()
        page.wait_for_selector("#health")
        if kind == "spike":  # the pointer over the spike reads its value
            box = page.locator("canvas[data-stream='joints']").bounding_box()
            page.mouse.move(box["x"] + box["width"] * 3.0 / 5.9, box["y"] + box["height"] / 2)
            readout = page.inner_text(".readout[data-stream='joints']")
            assert readout.startswith("3.000 s") and "1 1.0000e+6" in readout, readout
        finding = page.locator(f"#health .finding[data-kind='{kind}']")
        assert finding.count() == 1 and "joints" in finding.inner_text()
        if kind != "constant":  # a moment or a range of time: marked on the bar under the slider
            assert page.locator(f"#flag-bar .flag-range[data-kind='{kind}']").count() == 1
            finding.click()
            at = float(page.get_attribute("#time", "data-t"))
            assert abs(at - {"spike": 3.0, "gap": 1.9}[kind]) < 0.05, (name, at)
        page.go_back()
        page.wait_for_selector("#segments tr.row")
    assert not page.errors


def test_sorting_by_each_signal_brings_its_planted_episode_first(page, planted_view):
    """The signal menu sorts the whole list by one health signal, the worst first, and shows
    its value: each planted episode tops the list of its own signal, whatever its flags."""
    server, planted = planted_view
    _open(page, server, "/segments", "#segments tr.row")
    options = page.locator("#sort-signal option").all_inner_texts()
    assert set(planted.values()) <= set(options) and "misaligned" in options
    for name, kind in planted.items():
        page.select_option("#sort-signal", kind)
        page.wait_for_selector(f"th.sorted.desc[data-sort='health.{kind}']")
        first = page.locator("#segments tr.row").first
        assert first.locator("td a").inner_text() == name, kind
        values = [float(v) for v in page.locator(f"#segments td[data-signal='{kind}']").all_inner_texts()]
        assert values == sorted(values, reverse=True) and values[0] > values[1], (kind, values[:3])
    assert not page.errors


@pytest.mark.parametrize("speed", ["0.5", "2"])
def test_the_camera_and_the_plots_keep_one_clock_at_half_and_double_speed(page, view_demo, speed):
    server, _, _ = view_demo
    row = _row(server, "video-episode")
    _open(page, server, f"/segment/{row['id']}?version={row['version']}", "video[data-camera='cam/rgb']")
    page.wait_for_function("document.querySelector('video').readyState >= 2", timeout=30_000)
    lead = server.json(f"/api/segment/{row['id']}")["streams"][0]["mp4_start"]
    page.select_option("#speed", speed)
    page.click("#play")
    worst = 0.0
    for _ in range(8):  # while it plays: the clock the plots follow is the video's
        page.wait_for_timeout(120)
        # read in an animation frame, after the page's own tick of that frame: the clock then is
        # what the plots show, not one frame old (at 2x a late frame is a recorded frame apart)
        clock, video = page.evaluate("new Promise((done) => requestAnimationFrame(() => done(["
                                     "Number(document.querySelector('#time').dataset.t), "
                                     "document.querySelector('video').currentTime])))")
        if clock < 0.95 * float(page.evaluate("document.querySelector('#scrub').max")):
            worst = max(worst, abs(clock - (video + lead)))
    page.click("#play")
    assert worst < 1 / 30, worst
    # Home and End on the focused speed menu change the speed, and only the speed
    page.focus("#speed")
    t = page.get_attribute("#time", "data-t")
    page.keyboard.press("End")
    assert page.input_value("#speed") == "4" and page.get_attribute("#time", "data-t") == t
    page.keyboard.press("Home")
    assert page.input_value("#speed") == "0.25" and page.get_attribute("#time", "data-t") == t
    assert not page.errors, page.errors


def test_the_time_is_in_the_address_and_n_p_step_through_the_list(page, planted_view):
    server, _ = planted_view
    _open(page, server, "/segments?sort=name", "#segments tr.row")
    names = page.locator("#segments tr.row td a").all_inner_texts()
    page.locator("#segments tr.row td a", has_text=names[3]).click()
    page.wait_for_selector("#title")
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("Shift+ArrowRight")
    assert "t=2.00" in page.evaluate("location.hash")
    page.reload()
    page.wait_for_selector("#title")
    assert float(page.get_attribute("#time", "data-t")) == pytest.approx(2.0)
    page.keyboard.press("n")
    page.wait_for_function(f"document.querySelector('#title') && document.querySelector('#title').textContent === "
                           f"'{names[4]}'")
    for back in (names[3], names[2]):
        page.keyboard.press("p")
        page.wait_for_function(f"document.querySelector('#title') && document.querySelector('#title').textContent === "
                               f"'{back}'")
    assert not page.errors, page.errors


@pytest.fixture(scope="module")
def real_planted_view(tmp_path_factory) -> Iterator[tuple[ViewServer, dict[str, tuple[str, float]]]]:
    """1,000 episodes of real footage with two of each of ten planted kinds (``planted.real_store``)."""
    from planted import real_store

    client, where = real_store(tmp_path_factory.mktemp("real-planted") / "store")
    server = ViewServer(client.store.display)
    yield server, where
    server.stop()


def test_each_planted_kind_among_a_thousand_real_episodes_is_a_few_clicks_away(page, real_planted_view):
    """The flagged filter lists the planted episodes and nothing else (those only the site's other
    episodes tell too: a stub, a camera lacking); from the list, an episode of each kind opens
    with its finding named and its time range marked (the whole episode, for those of it all)."""
    server, where = real_planted_view
    _open(page, server, "/segments", "#segments tr.row")
    page.check("#flagged-only")
    page.click("#filters button")
    page.wait_for_function(f"(document.querySelector('#count') || {{}}).textContent === '1–{len(where)} of {len(where)}'")
    rows = page.locator("#segments tr.row td a")
    assert set(rows.all_inner_texts()) == set(where)
    first_of_kind = {kind: name for name, (kind, _) in sorted(where.items(), reverse=True)}
    for kind, name in sorted(first_of_kind.items()):
        page.locator("#segments tr.row td a", has_text=name).click()
        page.wait_for_selector(f"#health .finding[data-kind='{kind}']")
        assert page.locator(f"#flag-bar .flag-range[data-kind='{kind}']").count() >= 1, (name, kind)
        page.go_back()
        page.wait_for_selector("#segments tr.row")
    assert not page.errors, page.errors


@pytest.fixture(scope="module")
def long_recording(tmp_path_factory) -> Iterator[tuple[ViewServer, dict]]:
    """Twenty minutes of two joints at 100 Hz (120,000 samples) with a spike of 5 samples at 600 s."""
    client = rayform.Client(tmp_path_factory.mktemp("long") / "store")
    t = np.arange(120_000, dtype=np.int64) * 10_000_000
    q = np.stack([np.sin(t / 1e9 / 30), np.cos(t / 1e9 / 45)], axis=1).astype(np.float32)
    q[60_000:60_005, 1] = 1e6
    ref = client.segments.add("lab", "twenty-minutes", [rayform.ArrayStream("joints", t, q)])
    server = ViewServer(client.store.display)
    yield server, {"id": ref.id, "version": ref.version}
    server.stop()


def test_a_drag_over_a_plot_zooms_every_plot_to_each_sample_and_esc_zooms_out(page, long_recording):
    server, row = long_recording
    _open(page, server, f"/segment/{row['id']}?version={row['version']}", "canvas[data-stream='joints']")
    canvas = "canvas[data-stream='joints']"
    page.wait_for_function(f"document.querySelector(\"{canvas}\").dataset.points > 0")
    assert int(page.get_attribute(canvas, "data-stride")) > 1  # the whole episode: each bucket's extremes
    box = page.locator(canvas).bounding_box()
    x = lambda seconds, lo=0.0, hi=1199.99: box["x"] + box["width"] * (seconds - lo) / (hi - lo)

    def drag(a: float, b: float, lo: float, hi: float) -> None:
        page.mouse.move(x(a, lo, hi), box["y"] + 40)
        page.mouse.down()
        page.mouse.move(x(b, lo, hi), box["y"] + 40, steps=6)
        page.mouse.up()

    drag(570.0, 630.0, 0.0, 1199.99)  # a minute of twenty: 6,000 samples, still more than a plot takes
    page.wait_for_function(f"Math.abs(document.querySelector(\"{canvas}\").dataset.from - 570) < 2")
    lo, hi = float(page.get_attribute(canvas, "data-from")), float(page.get_attribute(canvas, "data-to"))
    drag(599.0, 601.0, lo, hi)  # and two seconds of that minute: every sample
    page.wait_for_function(f"document.querySelector(\"{canvas}\").dataset.stride === '1'")
    lo, hi = float(page.get_attribute(canvas, "data-from")), float(page.get_attribute(canvas, "data-to"))
    assert abs(lo - 599.0) < 2 and abs(hi - 601.0) < 2 and hi - lo < 4
    assert int(page.get_attribute(canvas, "data-points")) == pytest.approx((hi - lo) * 100 + 3, abs=2)
    assert not page.locator("#zoom-out").is_hidden() and "of 1199.99 s" in page.inner_text("#zoom")
    page.mouse.move(x(600.02, lo, hi), box["y"] + 40)  # the spike, one sample in 120,000, read under the pointer
    assert "1 1.0000e+6" in page.inner_text(".readout[data-stream='joints']")
    page.mouse.click(x(600.5, lo, hi), box["y"] + 40)  # a click in the zoomed plot goes to its time
    assert abs(float(page.get_attribute("#time", "data-t")) - 600.5) < 0.05
    page.keyboard.press("Escape")
    page.wait_for_function(f"document.querySelector(\"{canvas}\").dataset.from === '0.000'")
    assert int(page.get_attribute(canvas, "data-stride")) > 1 and page.locator("#zoom-out").is_hidden()
    assert not page.errors, page.errors
