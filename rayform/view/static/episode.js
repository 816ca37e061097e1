// An episode's page. Its cameras play in sync with plots of every array and pose stream on one
// clock (seconds from the segment's first timestamp): a recorded video played by the browser
// drives the clock while it plays; frames are shown one by one otherwise.
import { api, el, put, q } from "./dom.js";
import { segmentLink } from "./format.js";
import * as plot from "./plot.js";

function lastAtOrBefore(times, t) {
  // times come rounded to the microsecond: a clock within one of a frame's time is at it
  let lo = 0, hi = times.length - 1;
  t += 1e-6;
  if (hi < 0 || t < times[0]) return 0;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (times[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

class Plot {
  // One array stream: each element shown a line over the episode's time (or the window zoomed
  // into: ``zoom``, shared by every plot), a cursor at the clock. A click goes to a time, a drag
  // zooms into the stretch dragged over. Its legend shows or hides an element (the first ten).
  constructor(name, s, zoom, handlers, flagged = []) {
    this.name = name; this.s = s; this.zoom = zoom; this.flagged = flagged;
    this.shown = new Set(s.labels.map((_, k) => k).slice(0, plot.COLORS.length));
    this.canvas = el("canvas", { "data-stream": name });
    const timeAt = (e) => {
      const box = this.canvas.getBoundingClientRect();
      return zoom.from + ((e.clientX - box.left) / box.width) * (zoom.to - zoom.from);
    };
    this.canvas.addEventListener("mousedown", (e) => { this.drag = { x: e.clientX, from: timeAt(e), to: timeAt(e) }; });
    // the button let go anywhere on the page (the page hands it to every plot: ``release``)
    this.release = (e) => {
      if (!this.drag) return;
      const drag = this.drag; this.drag = null;
      if (Math.abs(e.clientX - drag.x) > 4) handlers.zoom(Math.min(drag.from, timeAt(e)), Math.max(drag.from, timeAt(e)));
      else if (e.target === this.canvas) handlers.seek(drag.from);
      this.draw(this.t || 0);
    };
    // the values under the pointer: the sample nearest its time, each element shown
    this.readout = el("div", { class: "readout muted", "data-stream": name }, "\u00a0");
    this.canvas.addEventListener("mousemove", (e) => {
      const t = timeAt(e), times = this.s.t, i = lastAtOrBefore(times, t);
      if (this.drag) { this.drag.to = t; this.draw(this.t || 0); }
      if (!times.length) return;
      const k = i + 1 < times.length && times[i + 1] - t < t - times[i] ? i + 1 : i;
      this.readout.textContent = `${times[k].toFixed(3)} s  ` + [...this.shown].map((j) =>
        `${this.s.labels[j]} ${this.s.values[j][k] === null ? "—" : Number(this.s.values[j][k]).toPrecision(5)}`).join("  ");
    });
    const legend = el("div", { class: "legend" }, s.labels.map((label, k) => {
      const item = el("span", { class: this.shown.has(k) ? "on" : "off", style: `color:${plot.color(k)}`,
        title: "show or hide", "data-element": k }, `■ ${label}`);
      item.addEventListener("click", () => {
        if (this.shown.has(k)) this.shown.delete(k); else this.shown.add(k);
        item.className = this.shown.has(k) ? "on" : "off";
        this.base = null; this.draw(this.t || 0);
      });
      return item;
    }));
    this.node = el("div", { class: "plot" }, el("div", {}, el("b", {}, name), " ",
      el("span", { class: "muted" }, `${s.kind}${s.units ? ", " + s.units : ""}`
        + (s.labels.length > plot.COLORS.length ? ` · ${s.labels.length} elements: click a name to show or hide it` : ""))),
    legend, this.canvas, this.readout);
    this.base = null;
  }

  // new values to draw (a zoom's window fetched), the elements shown kept
  replace(s) { this.s = s; this.base = null; }

  // the zoomed window's times onto [0, w]
  xScale(w) { return plot.scale(this.zoom.from, Math.max(this.zoom.to, this.zoom.from + 1e-9), 0, w); }

  draw(t) {
    this.t = t;
    const c = this.canvas, r = plot.ratio(), { from, to } = this.zoom;
    const w = Math.max(200, c.clientWidth) * r, h = 150 * r;
    if (!this.base || this.base.width !== w || this.base.window !== `${from}:${to}`) this.base = this.render(w, h);
    const { g } = plot.sized(c, 150);
    g.drawImage(this.base, 0, 0);
    const X = this.xScale(w);
    if (t >= from && t <= to) plot.segment(g, X(t), 0, X(t), h, "#000", 1.5 * r);
    if (this.drag) {  // the stretch being dragged over
      g.fillStyle = "rgba(31, 119, 180, 0.2)";
      g.fillRect(Math.min(X(this.drag.from), X(this.drag.to)), 0, Math.abs(X(this.drag.to) - X(this.drag.from)), h);
    }
    c.dataset.cursorX = X(t).toFixed(1);
    c.dataset.from = from.toFixed(3); c.dataset.to = to.toFixed(3);
    c.dataset.points = this.s.t.length; c.dataset.stride = this.s.stride;
  }

  render(w, h) {
    const base = document.createElement("canvas");
    base.width = w; base.height = h; base.window = `${this.zoom.from}:${this.zoom.to}`;
    const g = base.getContext("2d");
    const shown = this.s.values.map((column, k) => [column, k]).filter(([, k]) => this.shown.has(k));
    const [lo, hi] = plot.extent(shown.map(([column]) => column));
    const pad = 6, X = this.xScale(w), Y = plot.scale(lo, hi, h - pad, pad);
    g.fillStyle = "rgba(220, 40, 40, 0.18)";  // the time ranges a health signal flags in this stream
    for (const f of this.flagged) {
      const x0 = X(f.from_s), x1 = X(f.to_s);
      if (x1 < 0 || x0 > w) continue;
      g.fillRect(Math.min(Math.max(x0, 0), w - 3), 0, Math.max(3, Math.min(x1, w) - Math.max(x0, 0)), h);
    }
    plot.text(g, hi.toPrecision(4), 2, 12, "#888", 10);
    plot.text(g, lo.toPrecision(4), 2, h - 2, "#888", 10);
    for (const [column, k] of shown) plot.line(g, column, (i) => X(this.s.t[i]), Y, plot.color(k), 1.2);
    return base;
  }
}

class Camera {
  // A camera: its recorded video played by the browser where it can, else its frames one by one.
  constructor(summary, s, clock) {
    this.s = s; this.clock = clock; this.times = s.times; this.shown = -1;
    this.offset = s.mp4_start ?? (s.times.length ? s.times[0] : 0); // the MP4's time 0 on the page's clock
    const base = `/api/segment/${encodeURIComponent(summary.id)}`;
    this.frameUrl = (i) => `${base}/frame/${encodeURIComponent(s.name)}/${i}${q({ version: summary.version })}`;
    const probe = document.createElement("video");
    this.mode = s.mp4 && s.mime && probe.canPlayType(s.mime) !== "" ? "video" : "frames";
    if (this.mode === "video") {
      this.media = el("video", { muted: true, playsinline: true, preload: "auto", "data-camera": s.name,
        src: `${base}/video/${encodeURIComponent(s.name)}${q({ version: summary.version })}` });
      this.media.muted = true;
      this.media.addEventListener("error", () => this.toFrames());
    } else {
      this.media = el("img", { alt: s.name, "data-camera": s.name });
    }
    this.label = el("div", { class: "muted" });
    this.node = el("div", { class: "camera" }, el("div", {}, el("b", {}, s.name), " ",
      el("span", { class: "badge" }, this.mode === "video" ? `${s.codec}, played as recorded` :
        (s.codec ? `${s.codec}, frames` : s.encoding))), this.media, this.label);
  }

  toFrames() {
    if (this.mode === "frames") return;
    this.mode = "frames";
    const img = el("img", { alt: this.s.name, "data-camera": this.s.name });
    this.media.replaceWith(img);
    this.media = img; this.shown = -1; this.loading = false;
    this.show(this.clock.t, false);
  }

  show(t, playing) {
    const i = lastAtOrBefore(this.times, t);
    this.label.textContent = `frame ${i + 1} of ${this.times.length}`;
    this.node.dataset.frame = i;
    if (this.mode === "video") {
      const want = Math.max(0, t - this.offset);
      if (playing) {
        if (this.media.paused) this.media.play().catch(() => {});
        if (Math.abs(this.media.currentTime - want) > 0.25) this.media.currentTime = want;
      } else {
        if (!this.media.paused) this.media.pause();
        // the middle of frame i's span, so the browser shows frame i and not its neighbour
        const next = i + 1 < this.times.length ? this.times[i + 1] : this.times[i] + 1 / 30;
        const mid = (this.times[i] + next) / 2 - this.offset;
        if (Math.abs(this.media.currentTime - mid) > 1e-3) this.media.currentTime = Math.max(0, mid);
      }
    } else {
      this.wanted = i;
      this.fetchWanted();
    }
  }

  fetchWanted() {
    // one frame asked at a time; the one wanted when it arrives is asked next (none is lost)
    if (this.loading || this.wanted === this.shown) return;
    this.shown = this.wanted; this.loading = true;
    this.media.onload = this.media.onerror = () => { this.loading = false; this.fetchWanted(); };
    this.media.src = this.frameUrl(this.shown);
  }
}

export async function episodePage(main, id, version, startAt = 0) {
  const summary = await api(`/api/segment/${encodeURIComponent(id)}${q({ version })}`);
  const series = await api(`/api/segment/${encodeURIComponent(id)}/series${q({ version: summary.version })}`);
  const clock = { t: 0, playing: false, speed: 1 };
  const duration = Math.max(summary.duration_s, 1e-6);
  const cams = summary.streams.filter((s) => s.kind === "image").map((s) => new Camera(summary, s, clock));
  const findings = summary.findings || [];
  const zoom = { from: 0, to: duration, asked: 0 };
  const plots = Object.entries(series).map(([name, s]) => new Plot(name, s, zoom,
    { seek: (t) => seek(t), zoom: (a, b) => zoomTo(a, b) }, findings.filter((f) => f.stream === name)));
  const zoomOut = el("button", { id: "zoom-out", title: "the whole episode again (Esc)", hidden: true,
    onclick: () => zoomTo(0, duration) }, "zoom out");
  const zoomed = el("span", { id: "zoom", class: "muted" });
  // a drag over a plot: every plot shows that stretch, its samples fetched again (as many as the
  // window holds, up to the page's budget: zoomed far enough, each one)
  async function zoomTo(from, to) {
    from = Math.max(0, from); to = Math.min(duration, to);
    if (!(to - from > 1e-6)) return;
    const asked = ++zoom.asked, whole = from <= 0 && to >= duration;
    const fresh = whole ? series : await api(`/api/segment/${encodeURIComponent(summary.id)}/series${q(
      { version: summary.version, from: from.toFixed(6), to: to.toFixed(6) })}`);
    if (asked !== zoom.asked) return;  // a later zoom came first
    zoom.from = from; zoom.to = to;
    for (const p of plots) if (fresh[p.name]) p.replace(fresh[p.name]);
    zoomOut.hidden = whole;
    zoomed.textContent = whole ? "" : `showing ${from.toFixed(2)}–${to.toFixed(2)} s of ${duration.toFixed(2)} s · `;
    render();
  }
  // every flagged time range under the slider; the list of findings, each a link to its time
  const flagBar = el("div", { class: "flag-bar", id: "flag-bar" }, findings.filter((f) => f.to_s > 0).map((f) =>
    el("span", { class: "flag-range", "data-kind": f.kind, title: `${f.kind} ${f.stream}`,
      style: `left:${(100 * f.from_s / duration).toFixed(3)}%;width:max(3px, ${(100 * (f.to_s - f.from_s) / duration).toFixed(3)}%)`,
      onclick: () => seek(f.from_s) })));
  const health = findings.length ? el("div", { class: "health", id: "health" }, el("b", {}, "Flagged: "),
    findings.map((f) => el("button", { class: "finding", "data-kind": f.kind, onclick: () => seek(f.from_s) },
      `${f.kind} ${f.stream} ${f.from_s.toFixed(2)}${f.to_s > f.from_s ? "–" + f.to_s.toFixed(2) : ""} s`))) : null;
  const step = (() => {
    const times = cams.length ? cams[0].times : [];
    return times.length > 1 ? (times[times.length - 1] - times[0]) / (times.length - 1) : 1 / 30;
  })();
  const slider = el("input", { type: "range", min: 0, max: duration, step: "any", value: 0, id: "scrub",
    "aria-label": "time" });
  const time = el("span", { id: "time", class: "num" });
  const play = el("button", { id: "play", title: "play or pause (space)" }, "▶ play");
  const speed = el("select", { id: "speed" }, [0.25, 0.5, 1, 2, 4].map((v) => el("option", { value: v, selected: v === 1 }, `${v}×`)));
  function render() {
    time.textContent = `${clock.t.toFixed(3)} s / ${duration.toFixed(3)} s`;
    time.dataset.t = clock.t.toFixed(4);
    slider.value = clock.t;
    for (const c of cams) c.show(clock.t, clock.playing);
    for (const p of plots) p.draw(clock.t);
  }
  function seek(t) { clock.t = Math.min(Math.max(0, t), duration); render(); remember(); }
  // the time in the address (#/segment/ID?version=…&t=12.30): a link or a reload comes back to it
  function remember() {
    if (clock.playing) return;
    history.replaceState(null, "", `#/segment/${encodeURIComponent(summary.id)}${q({ version: summary.version, t: clock.t.toFixed(2) })}`);
  }
  // the next or previous episode of the list last shown
  function neighbour(step) {
    const list = JSON.parse(sessionStorage.getItem("rayform.list") || "[]");
    const at = list.findIndex(([i]) => i === summary.id);
    const next = at >= 0 ? list[at + step] : undefined;
    if (next) location.hash = segmentLink(next[0], next[1]);
  }
  function stepFrames(n) {
    if (clock.playing) toggle();
    if (cams.length && cams[0].times.length) {
      const times = cams[0].times, i = lastAtOrBefore(times, clock.t);
      seek(times[Math.min(Math.max(0, i + n), times.length - 1)]);
    } else seek(clock.t + n * step);
  }
  let last = 0, frame = 0;
  function tick(now) {
    if (!clock.playing) return;
    const lead = cams.find((c) => c.mode === "video" && !c.media.paused && c.media.readyState >= 2);
    // a playing video is the clock at any speed (the browser decodes at its own pace, at its
    // playbackRate); else the wall clock
    if (lead) clock.t = lead.media.currentTime + lead.offset;
    else clock.t += ((now - last) / 1000) * clock.speed;
    last = now;
    if (clock.t >= duration) { clock.t = duration; toggle(); }
    render();
    frame = requestAnimationFrame(tick);
  }
  function toggle() {
    clock.playing = !clock.playing;
    play.textContent = clock.playing ? "❚❚ pause" : "▶ play";
    for (const c of cams) if (c.mode === "video") c.media.playbackRate = clock.speed;
    if (clock.playing) {
      if (clock.t >= duration) clock.t = 0;
      last = performance.now(); frame = requestAnimationFrame(tick);
    } else cancelAnimationFrame(frame);
    render();
    remember();
  }
  play.addEventListener("click", toggle);
  speed.addEventListener("change", () => { clock.speed = Number(speed.value); for (const c of cams) if (c.mode === "video") c.media.playbackRate = clock.speed; });
  slider.addEventListener("input", () => { if (clock.playing) toggle(); seek(Number(slider.value)); });
  const keys = (e) => {
    if (e.target instanceof HTMLInputElement && e.target.type !== "range") return;
    if (e.target instanceof HTMLSelectElement) return;  // its keys are its own (Home/End: the first or last speed)
    if (e.key === " ") { e.preventDefault(); toggle(); }
    else if (e.key === "ArrowRight") { e.preventDefault(); e.shiftKey ? seek(clock.t + 1) : stepFrames(1); }
    else if (e.key === "ArrowLeft") { e.preventDefault(); e.shiftKey ? seek(clock.t - 1) : stepFrames(-1); }
    else if (e.key === "n") neighbour(1);
    else if (e.key === "p") neighbour(-1);
    else if (e.key === "Home") seek(0);
    else if (e.key === "End") seek(duration);
    else if (e.key === "Escape" && !zoomOut.hidden) zoomTo(0, duration);
  };
  const release = (e) => { for (const p of plots) p.release(e); };
  document.addEventListener("keydown", keys);
  document.addEventListener("mouseup", release);
  window.addEventListener("resize", render);
  const teardown = () => {
    clock.playing = false; cancelAnimationFrame(frame);
    document.removeEventListener("keydown", keys); document.removeEventListener("mouseup", release);
    window.removeEventListener("resize", render);
  };
  const meta = el("dl", { class: "meta", id: "meta" }, Object.entries(summary.meta).map(([k, v]) =>
    [el("dt", {}, k), el("dd", {}, typeof v === "string" ? v : JSON.stringify(v))]));
  put(main,
    el("h1", { id: "title" }, summary.name),
    el("div", { class: "muted" }, `${summary.id} @ ${summary.version.slice(0, 12)} · site ${summary.site} · `
      + `${summary.duration_s.toFixed(2)} s · `,
      summary.latest === summary.version ? "its latest version"
        : el("a", { href: segmentLink(summary.id, summary.latest) }, "an older version: see the latest")),
    summary.task ? el("div", { class: "task", id: "task" }, summary.task) : null,
    el("div", { class: "controls" }, play,
      el("button", { id: "back", title: "previous frame (←)", onclick: () => stepFrames(-1) }, "◀"),
      el("button", { id: "forward", title: "next frame (→)", onclick: () => stepFrames(1) }, "▶|"),
      slider, time, speed),
    flagBar, health,
    el("div", { class: "muted" }, "keys: ", el("span", { class: "kbd" }, "space"), " play · ",
      el("span", { class: "kbd" }, "← →"), " a frame · ", el("span", { class: "kbd" }, "shift ← →"), " a second · ",
      el("span", { class: "kbd" }, "n p"), " the next or previous episode of the list · click a plot to go there, "
      + "drag over one to zoom in (", el("span", { class: "kbd" }, "Esc"), " out)"),
    plots.length ? el("div", { class: "zoom" }, zoomed, zoomOut) : null,
    el("div", { class: "cameras" }, cams.map((c) => c.node)),
    plots.map((p) => p.node),
    Object.keys(summary.meta).length ? [el("h2", {}, "Metadata"), meta] : null,
    el("h2", {}, "Streams"),
    el("table", {}, el("tr", {}, el("th", {}, "stream"), el("th", {}, "kind"), el("th", {}, "count"),
      el("th", {}, "shape"), el("th", {}, "dtype"), el("th", {}, "encoding")),
    summary.streams.map((s) => el("tr", {}, el("td", {}, s.name), el("td", {}, s.kind), el("td", { class: "num" }, s.count),
      el("td", {}, `(${s.shape.join(", ")})`), el("td", {}, s.dtype), el("td", {}, s.codec || s.encoding || "")))));
  if (startAt) seek(startAt); else render();
  return teardown;
}
