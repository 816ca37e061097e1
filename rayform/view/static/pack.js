// rayform view: a pack's page. Its statistics per element (percentiles, mean, spread) and its
// samples as a dataset builds them, each array stream's action chunk over the recording.
"use strict";

function statsCanvas(name, st, percentiles, labels) {
  // per element: min–max (thin), q01–q99 (medium), quartiles (box), median (tick), mean (dot)
  const at = (p) => percentiles.indexOf(p);
  const rows = st.mean.length, ratio = window.devicePixelRatio || 1, rowH = 22;
  const c = el("canvas", { "data-stats": name });
  c.style.height = `${rows * rowH + 8}px`;
  requestAnimationFrame(() => {
    const w = Math.max(300, c.clientWidth) * ratio, h = (rows * rowH + 8) * ratio;
    c.width = w; c.height = h;
    const g = c.getContext("2d");
    g.font = `${11 * ratio}px sans-serif`;
    const left = 150 * ratio, right = w - 170 * ratio;
    for (let k = 0; k < rows; k++) {
      const lo = st.min[k], hi = st.max[k], y = (k * rowH + 15) * ratio;
      const X = (v) => (hi > lo ? left + ((v - lo) / (hi - lo)) * (right - left) : (left + right) / 2);
      const p = (q) => st.percentiles[at(q)][k];
      g.fillStyle = "#333"; g.fillText(labels[k] || String(k), 4 * ratio, y + 4 * ratio);
      g.strokeStyle = "#999"; g.lineWidth = 1 * ratio;
      g.beginPath(); g.moveTo(X(lo), y); g.lineTo(X(hi), y); g.stroke();
      g.strokeStyle = "#4a7bd0"; g.lineWidth = 3 * ratio;
      g.beginPath(); g.moveTo(X(p(1)), y); g.lineTo(X(p(99)), y); g.stroke();
      g.fillStyle = "#9bb9ea"; g.fillRect(X(p(25)), y - 6 * ratio, Math.max(1, X(p(75)) - X(p(25))), 12 * ratio);
      g.fillStyle = "#1d232a"; g.fillRect(X(p(50)) - 1 * ratio, y - 7 * ratio, 2 * ratio, 14 * ratio);
      g.fillStyle = "#d62728"; g.beginPath(); g.arc(X(st.mean[k]), y, 3 * ratio, 0, 7); g.fill();
      g.fillStyle = "#555";
      g.fillText(`${fmt(lo)} … ${fmt(hi)}  μ ${fmt(st.mean[k])} σ ${fmt(st.std[k])}`, right + 8 * ratio, y + 4 * ratio);
    }
  });
  return c;
}

function fmt(v) { return v === null ? "–" : Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2) : v.toFixed(3); }

function chunkCanvas(name, a, tNow) {
  // the recorded values (lines) over the chunk's time; the chunk's steps as dots (hollow: pad)
  const c = el("canvas", { "data-chunk": name });
  c.style.height = "160px";
  requestAnimationFrame(() => {
    const ratio = window.devicePixelRatio || 1, w = Math.max(300, c.clientWidth) * ratio, h = 160 * ratio;
    c.width = w; c.height = h;
    const g = c.getContext("2d");
    const ts = [tNow, ...a.chunk_t, ...a.recorded_t];
    const t0 = Math.min(...ts), t1 = Math.max(...ts);
    let lo = Infinity, hi = -Infinity;
    for (const row of [...a.chunk, ...a.recorded, a.now]) for (const v of row.slice(0, COLORS.length)) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    if (!isFinite(lo)) { lo = -1; hi = 1; }
    if (hi - lo < 1e-12) { hi += 1; lo -= 1; }
    const X = (t) => 8 * ratio + ((t - t0) / Math.max(t1 - t0, 1e-9)) * (w - 16 * ratio);
    const Y = (v) => h - 6 * ratio - ((v - lo) / (hi - lo)) * (h - 12 * ratio);
    g.strokeStyle = "#000"; g.setLineDash([4, 4]);
    g.beginPath(); g.moveTo(X(tNow), 0); g.lineTo(X(tNow), h); g.stroke(); g.setLineDash([]);
    const dims = Math.min(COLORS.length, a.labels.length);
    for (let k = 0; k < dims; k++) {
      g.strokeStyle = COLORS[k]; g.lineWidth = 1 * ratio; g.beginPath();
      a.recorded.forEach((row, i) => { if (row[k] === null) return; const x = X(a.recorded_t[i]), y = Y(row[k]); i ? g.lineTo(x, y) : g.moveTo(x, y); });
      g.stroke();
      a.chunk.forEach((row, i) => {
        if (row[k] === null) return;
        g.beginPath(); g.arc(X(a.chunk_t[i]), Y(row[k]), 3 * ratio, 0, 7);
        if (a.is_pad[i]) { g.strokeStyle = "#999"; g.stroke(); g.strokeStyle = COLORS[k]; } else { g.fillStyle = COLORS[k]; g.fill(); }
      });
    }
  });
  return c;
}

async function packPage(main, sliceId, key, params) {
  const p = await api(`/api/pack/${encodeURIComponent(sliceId)}/${encodeURIComponent(key)}`);
  const index = Math.min(Math.max(0, Number(params.get("sample") || 0)), p.samples - 1);
  const base = `/api/pack/${encodeURIComponent(p.slice.id)}/${encodeURIComponent(p.key)}`;
  const sample = await api(`${base}/sample/${index}`);
  const go = (i) => { location.hash = `#/pack/${encodeURIComponent(p.slice.id)}/${encodeURIComponent(p.key)}?sample=${i}`; };
  const input = el("input", { type: "number", min: 0, max: p.samples - 1, value: index, id: "sample-index", style: "width:7em" });
  const stats = Object.entries(p.stats).filter(([n]) => p.schema[n] || p.schema[n.replace(/:delta$/, "")]);
  put(main, 
    el("h1", {}, `Pack ${p.key}`),
    el("div", { class: "muted" }, "slice ", el("a", { href: `#/slice/${encodeURIComponent(p.slice.id)}` }, p.slice.name || p.slice.id),
      ` · ${p.samples} samples at ${p.fps} fps · ${p.shards} shards · ${bytes(p.bytes)}`
      + (p.bytes_a_frame ? ` · ${bytes(p.bytes_a_frame)} a frame` : "")),
    el("p", { id: "pack-default" }, p.default ? `A dataset at ${p.fps} fps reads this pack by default.`
      : `A dataset at ${p.fps} fps reads another pack by default; pass pack="${p.key}" to read this one.`),
    el("table", {}, el("tr", {}, el("th", {}, "codec"), el("td", {}, codecOf(p))),
      el("tr", {}, el("th", {}, "horizon"), el("td", {}, `${p.horizon} steps`)),
      el("tr", {}, el("th", {}, "history"), el("td", {}, `${p.history} steps`)),
      el("tr", {}, el("th", {}, "images"), el("td", {}, p.resize ? `resized ${p.resize.join("x")}` : "full size"))),
    el("h2", {}, `Sample ${index}`),
    el("div", { class: "pager" },
      el("button", { id: "prev-sample", disabled: index <= 0, onclick: () => go(index - 1) }, "‹"),
      input, el("button", { onclick: () => go(Number(input.value)) }, "go"),
      el("button", { id: "next-sample", disabled: index >= p.samples - 1, onclick: () => go(index + 1) }, "›"),
      el("button", { onclick: () => go(Math.floor(Math.random() * p.samples)) }, "random")),
    el("div", { class: "muted", id: "sample-meta" }, `segment `, el("a", { href: segmentLink(sample.meta.segment, sample.meta.segment_version) }, sample.meta.segment),
      ` · t = ${sample.t_s.toFixed(3)} s · grid step ${sample.meta.frame_index} · site ${sample.meta.site}`),
    sample.meta.task ? el("div", { class: "task" }, sample.meta.task) : null,
    el("div", { class: "cameras" }, sample.images.map((n) => el("div", { class: "camera" }, el("b", {}, n),
      el("img", { alt: n, src: `${base}/sample/${index}/image/${encodeURIComponent(n)}` })))),
    Object.entries(sample.arrays).map(([n, a]) => el("div", { class: "plot" },
      el("div", {}, el("b", {}, n), " ", el("span", { class: "muted", "data-pad": n },
        `now: [${a.now.slice(0, 8).map(fmt).join(", ")}${a.now.length > 8 ? ", …" : ""}] · chunk of ${a.chunk.length} steps, `
        + `${a.is_pad.filter(Boolean).length} padded (hollow) · lines: the recording`)),
      el("div", { class: "legend" }, a.labels.slice(0, COLORS.length).map((label, k) => el("span", { style: `color:${color(k)}` }, `■ ${label}`)),
        a.labels.length > COLORS.length ? el("span", { class: "muted" }, `(the first ${COLORS.length} of ${a.labels.length})`) : null),
      chunkCanvas(n, a, sample.t_s))),
    el("h2", {}, "Statistics"),
    stats.length ? stats.map(([n, st]) => el("div", { class: "stats" }, el("b", {}, n), ` (${st.count} values)`,
      statsCanvas(n, st, p.percentiles, (p.schema[n] && p.schema[n].names) || (p.schema[n.replace(/:delta$/, "")] || {}).names || [])))
      : el("p", { class: "muted" }, "This pack keeps no statistics."));
}
