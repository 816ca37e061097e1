// A pack's page. Its statistics per element (percentiles, mean, spread) and its samples as a
// dataset builds them, each array stream's action chunk over the recording.
import { api, el, put } from "./dom.js";
import { bytes, codecOf, number, segmentLink } from "./format.js";
import * as plot from "./plot.js";

function statsCanvas(name, st, percentiles, labels) {
  // per element: min–max (thin), q01–q99 (medium), quartiles (box), median (tick), mean (dot)
  const at = (p) => percentiles.indexOf(p);
  const rows = st.mean.length, rowH = 22;
  return plot.later(el("canvas", { "data-stats": name }), rows * rowH + 8, ({ g, w, r }) => {
    const left = 150 * r, right = w - 170 * r;
    for (let k = 0; k < rows; k++) {
      const lo = st.min[k], hi = st.max[k], y = (k * rowH + 15) * r;
      const X = plot.scale(lo, hi, left, right);
      const p = (n) => st.percentiles[at(n)][k];
      plot.text(g, labels[k] || String(k), 4 * r, y + 4 * r, "#333", 11);
      plot.segment(g, X(lo), y, X(hi), y, "#999", 1 * r);
      plot.segment(g, X(p(1)), y, X(p(99)), y, "#4a7bd0", 3 * r);
      g.fillStyle = "#9bb9ea"; g.fillRect(X(p(25)), y - 6 * r, Math.max(1, X(p(75)) - X(p(25))), 12 * r);
      g.fillStyle = "#1d232a"; g.fillRect(X(p(50)) - 1 * r, y - 7 * r, 2 * r, 14 * r);
      plot.dot(g, X(st.mean[k]), y, 3 * r, "#d62728");
      plot.text(g, `${number(lo)} … ${number(hi)}  μ ${number(st.mean[k])} σ ${number(st.std[k])}`, right + 8 * r,
        y + 4 * r, "#555", 11);
    }
  });
}

function chunkCanvas(name, a, tNow) {
  // the recorded values (lines) over the chunk's time; the chunk's steps as dots (hollow: pad)
  return plot.later(el("canvas", { "data-chunk": name }), 160, ({ g, w, h, r }) => {
    const ts = [tNow, ...a.chunk_t, ...a.recorded_t];
    const dims = Math.min(plot.COLORS.length, a.labels.length);
    const [lo, hi] = plot.extent([...a.chunk, ...a.recorded, a.now].map((row) => row.slice(0, dims)));
    const X = plot.scale(Math.min(...ts), Math.max(...ts), 8 * r, w - 8 * r), Y = plot.scale(lo, hi, h - 6 * r, 6 * r);
    plot.segment(g, X(tNow), 0, X(tNow), h, "#000", 1, [4, 4]);
    for (let k = 0; k < dims; k++) {
      plot.line(g, a.recorded.map((row) => row[k]), (i) => X(a.recorded_t[i]), Y, plot.COLORS[k], 1 * r);
      a.chunk.forEach((row, i) => {
        if (row[k] !== null) plot.dot(g, X(a.chunk_t[i]), Y(row[k]), 3 * r, plot.COLORS[k], a.is_pad[i]);
      });
    }
  });
}

export async function packPage(main, sliceId, key, params) {
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
        `now: [${a.now.slice(0, 8).map(number).join(", ")}${a.now.length > 8 ? ", …" : ""}] · chunk of ${a.chunk.length} steps, `
        + `${a.is_pad.filter(Boolean).length} padded (hollow) · lines: the recording`)),
      el("div", { class: "legend" }, a.labels.slice(0, plot.COLORS.length).map((label, k) => el("span", { style: `color:${plot.color(k)}` }, `■ ${label}`)),
        a.labels.length > plot.COLORS.length ? el("span", { class: "muted" }, `(the first ${plot.COLORS.length} of ${a.labels.length})`) : null),
      chunkCanvas(n, a, sample.t_s))),
    el("h2", {}, "Statistics"),
    stats.length ? stats.map(([n, st]) => el("div", { class: "stats" }, el("b", {}, n), ` (${st.count} values)`,
      statsCanvas(n, st, p.percentiles, (p.schema[n] && p.schema[n].names) || (p.schema[n.replace(/:delta$/, "")] || {}).names || [])))
      : el("p", { class: "muted" }, "This pack keeps no statistics."));
}
