// rayform view: the pages of a store, read from the server's JSON routes. Every text that
// comes from the store is put in with textContent (el() below), never parsed as HTML.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
  "#bcbd22", "#7f7f7f"];
const PAGE = 50;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v; // CSSOM: the page's policy refuses style attributes
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// a page's content: lists flattened, absent parts (null) left out
function put(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c)))));
}

async function api(path) {
  const response = await fetch(path);
  const body = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw new Error(body.error || `${response.status}`);
  return body;
}

function color(k) { return k < COLORS.length ? COLORS[k] : `hsl(${(k * 47) % 360}, 65%, 42%)`; }

function showError(e) {
  const box = document.getElementById("error");
  box.textContent = String(e && e.message ? e.message : e);
  box.hidden = false;
}

function seconds(v) { return v === null || v === undefined ? "-" : `${Number(v).toFixed(1)} s`; }
function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function q(params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") s.set(k, v);
  const text = s.toString();
  return text ? `?${text}` : "";
}
function segmentLink(id, version) { return `#/segment/${encodeURIComponent(id)}${q({ version })}`; }

// ---- router ----------------------------------------------------------------------------------

let teardown = null; // the open page's key handler and timers, removed on leaving it

async function route() {
  if (teardown) { teardown(); teardown = null; }
  document.getElementById("error").hidden = true;
  const main = document.getElementById("main");
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  put(main, el("p", { class: "muted" }, "Loading…"));
  try {
    if (parts[0] === "segments") await segmentsPage(main, params);
    else if (parts[0] === "segment") await episodePage(main, parts[1], params.get("version"), Number(params.get("t")) || 0);
    else if (parts[0] === "slice") await slicePage(main, parts[1]);
    else if (parts[0] === "pack") await packPage(main, parts[1], parts[2], params);
    else await homePage(main);
    main.dataset.page = parts[0] || "home";
  } catch (e) {
    put(main, );
    showError(e);
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// ---- sites and slices ------------------------------------------------------------------------

async function homePage(main) {
  const [sites, slices] = await Promise.all([api("/api/sites"), api("/api/slices")]);
  put(main, 
    el("h1", {}, "Sites"),
    sites.length ? el("table", { id: "sites" },
      el("tr", {}, el("th", {}, "site"), el("th", {}, "segments"), el("th", {}, "hours")),
      sites.map((s) => el("tr", { class: "row", onclick: () => { location.hash = `#/segments${q({ site: s.site })}`; } },
        el("td", {}, el("a", { href: `#/segments${q({ site: s.site })}` }, s.site)),
        el("td", { class: "num" }, s.segments), el("td", { class: "num" }, s.hours.toFixed(2)))))
      : el("p", { class: "muted" }, "No segments in this store. `rayform demo` makes some."),
    el("h2", {}, "Slices"),
    slices.length ? el("table", { id: "slices" },
      el("tr", {}, el("th", {}, "name"), el("th", {}, "id"), el("th", {}, "segments"), el("th", {}, "sites")),
      slices.map((s) => el("tr", { class: "row", onclick: () => { location.hash = `#/slice/${encodeURIComponent(s.id)}`; } },
        el("td", {}, el("a", { href: `#/slice/${encodeURIComponent(s.id)}` }, s.name || "-")),
        el("td", { class: "muted" }, s.id), el("td", { class: "num" }, s.segments), el("td", {}, s.sites.join(", ")))))
      : el("p", { class: "muted" }, "No slices."));
}

// ---- the segment list ------------------------------------------------------------------------

async function segmentsPage(main, params) {
  const f = {
    site: params.get("site") || "", task: params.get("task") || "", min: params.get("min") || "",
    max: params.get("max") || "", where: params.get("where") || "", sort: params.get("sort") || "recorded",
    desc: params.get("desc") || "", flagged: params.get("flagged") || "",
  };
  const offset = Number(params.get("offset") || 0);
  const page = await api(`/api/segments${q({ ...f, offset, limit: PAGE })}`);
  const go = (changes) => { location.hash = `#/segments${q({ ...f, offset: 0, ...changes })}`; };
  const form = el("form", { class: "filters", id: "filters", onsubmit: (e) => {
    e.preventDefault();
    const data = new FormData(form);
    go({ ...Object.fromEntries(["site", "task", "min", "max", "where"].map((k) => [k, data.get(k)])),
      flagged: data.get("flagged") ? "1" : "" });
  } },
  el("label", {}, "site", el("input", { name: "site", value: f.site, size: 10 })),
  el("label", {}, "task contains", el("input", { name: "task", value: f.task, size: 18 })),
  el("label", {}, "seconds ≥", el("input", { name: "min", value: f.min, size: 5, inputmode: "decimal" })),
  el("label", {}, "seconds ≤", el("input", { name: "max", value: f.max, size: 5, inputmode: "decimal" })),
  el("label", {}, "query (meta.success == false, has('cam0/rgb'), health.frozen > 1, …)",
    el("input", { name: "where", value: f.where })),
  el("label", {}, el("input", { type: "checkbox", name: "flagged", id: "flagged-only", checked: !!f.flagged }),
    " flagged only"),
  el("button", { type: "submit" }, "filter"));
  const column = (label, key) => el("th", {
    class: `sortable${f.sort === key ? " sorted" : ""}${f.sort === key && f.desc ? " desc" : ""}`,
    "data-sort": key,
    onclick: () => go({ sort: key, desc: f.sort === key && !f.desc ? "1" : "" }),
  }, label);
  const metaText = (m) => Object.entries(m).slice(0, 4).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ");
  const table = el("table", { id: "segments" },
    el("tr", {}, column("name", "name"), column("site", "site"), column("task", "task"),
      column("seconds", "duration"), el("th", {}, "streams"), column("flags", "flags"), el("th", {}, "metadata"),
      column("id", "id")),
    page.rows.map((r) => el("tr", { class: "row", "data-id": r.id, onclick: () => { location.hash = segmentLink(r.id, r.version); } },
      el("td", {}, el("a", { href: segmentLink(r.id, r.version) }, r.name)), el("td", {}, r.site),
      el("td", { class: "task-cell" }, r.task), el("td", { class: "num" }, seconds(r.duration_s)), el("td", { class: r.missing.length ? "num missing" : "num", title: r.streams.join(", ") },
        r.missing.length ? `${r.streams.length}, no ${r.missing.join(", ")}` : r.streams.length),
      el("td", { class: r.flags.length ? "flags flagged" : "flags muted",
        title: r.findings.map((x) => `${x.kind} ${x.stream}`).join("\n") }, r.flags.join(", ")),
      el("td", { class: "muted meta-cell", title: JSON.stringify(r.meta) }, metaText(r.meta)), el("td", { class: "muted" }, r.id))));
  // the list an episode page steps through (n, p): this page's rows, in order
  sessionStorage.setItem("rayform.list", JSON.stringify(page.rows.map((r) => [r.id, r.version])));
  const last = Math.min(offset + PAGE, page.total);
  const pager = el("div", { class: "pager" },
    el("button", { disabled: offset <= 0, onclick: () => go({ ...f, offset: Math.max(0, offset - PAGE) }) }, "‹ previous"),
    el("span", { id: "count" }, page.total ? `${offset + 1}–${last} of ${page.total}` : "no segments match"),
    el("button", { disabled: last >= page.total, onclick: () => go({ ...f, offset: offset + PAGE }) }, "next ›"));
  put(main, el("h1", {}, "Segments"), form, pager, table);
}

// ---- slices and packs ------------------------------------------------------------------------

async function slicePage(main, id) {
  const s = await api(`/api/slice/${encodeURIComponent(id)}`);
  const packLink = (p) => `#/pack/${encodeURIComponent(s.id)}/${encodeURIComponent(p.key)}`;
  put(main, 
    el("h1", {}, `Slice ${s.name || s.id}`),
    el("div", { class: "muted" }, `${s.id} · ${s.segments_total} segments · sites ${s.sites.join(", ")}`),
    el("h2", {}, "Packs"),
    s.packs.length ? el("table", { id: "packs" },
      el("tr", {}, ["key", "fps", "samples", "bytes", "a frame", "codec", "horizon", "history", "read by default", "apart"].map((h) => el("th", {}, h))),
      s.packs.map((p) => el("tr", { class: "row", onclick: () => { location.hash = packLink(p); } },
        el("td", {}, el("a", { href: packLink(p) }, p.key)), el("td", { class: "num" }, p.fps),
        el("td", { class: "num" }, p.samples), el("td", { class: "num" }, bytes(p.bytes)),
        el("td", { class: "num" }, p.bytes_a_frame ? bytes(p.bytes_a_frame) : "-"), el("td", {}, codecOf(p)),
        el("td", { class: "num" }, p.horizon), el("td", { class: "num" }, p.history),
        el("td", {}, p.default ? "yes" : ""), el("td", { class: "muted" }, p.apart.join("; ")))))
      : el("p", { class: "muted" }, `No packs. Make one: rayform pack ${s.id} --fps 15`),
    el("h2", {}, `Segments${s.segments_total > s.segments.length ? ` (first ${s.segments.length})` : ""}`),
    el("table", { id: "slice-segments" }, el("tr", {}, el("th", {}, "segment"), el("th", {}, "site"), el("th", {}, "version")),
      s.segments.map((g) => el("tr", {}, el("td", {}, el("a", { href: segmentLink(g.id, g.version) }, g.id)),
        el("td", {}, g.site), el("td", { class: "muted" }, g.version.slice(0, 12))))));
}

function codecOf(p) {
  const videos = Object.entries(p.video || {});
  if (!videos.length) return p.codec;
  return videos.map(([n, v]) => `${n}: ${v.codec}${v.kept ? " (kept)" : ""}${v.psnr ? `, ${v.psnr.toFixed(1)} dB` : ""}`).join("; ");
}
