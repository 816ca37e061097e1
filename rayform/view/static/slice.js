// A slice's page: its packs (which one a dataset reads by default) and its segments.
import { api, el, put } from "./dom.js";
import { bytes, codecOf, segmentLink } from "./format.js";

export async function slicePage(main, id) {
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
