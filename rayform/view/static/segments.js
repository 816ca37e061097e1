// The segment list: filtered by site, task, duration, a query or health flags; sorted by any
// column; a page at a time. The rows shown are the list an episode page steps through (n, p).
import { api, el, put, q } from "./dom.js";
import { number, seconds, segmentLink } from "./format.js";

const PAGE = 50;

export async function segmentsPage(main, params) {
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
  // sorting by a health signal: the worst first, its value a column of its own
  const signal = f.sort.startsWith("health.") ? f.sort.slice("health.".length) : null;
  const bySignal = el("select", { id: "sort-signal", "aria-label": "sort by a health signal",
    onchange: (e) => { if (e.target.value) go({ sort: `health.${e.target.value}`, desc: "1" }); } },
  el("option", { value: "" }, "sort by a signal…"),
  page.signals.map((k) => el("option", { value: k, selected: k === signal }, k)));
  const table = el("table", { id: "segments" },
    el("tr", {}, column("name", "name"), column("site", "site"), column("task", "task"),
      column("seconds", "duration"), el("th", {}, "streams"), column("flags", "flags"),
      signal ? column(signal, f.sort) : null, el("th", {}, "metadata"), column("id", "id")),
    page.rows.map((r) => el("tr", { class: "row", "data-id": r.id, onclick: () => { location.hash = segmentLink(r.id, r.version); } },
      el("td", {}, el("a", { href: segmentLink(r.id, r.version) }, r.name)), el("td", {}, r.site),
      el("td", { class: "task-cell" }, r.task), el("td", { class: "num" }, seconds(r.duration_s)), el("td", { class: r.missing.length ? "num missing" : "num", title: r.streams.join(", ") },
        r.missing.length ? `${r.streams.length}, no ${r.missing.join(", ")}` : r.streams.length),
      el("td", { class: r.flags.length ? "flags flagged" : "flags muted",
        title: r.findings.map((x) => `${x.kind} ${x.stream}`).join("\n") }, r.flags.join(", ")),
      signal ? el("td", { class: "num signal", "data-signal": signal }, number(r.signals[signal] ?? 0)) : null,
      el("td", { class: "muted meta-cell", title: JSON.stringify(r.meta) }, metaText(r.meta)), el("td", { class: "muted" }, r.id))));
  // the list an episode page steps through (n, p): this page's rows, in order
  sessionStorage.setItem("rayform.list", JSON.stringify(page.rows.map((r) => [r.id, r.version])));
  const last = Math.min(offset + PAGE, page.total);
  const pager = el("div", { class: "pager" },
    el("button", { disabled: offset <= 0, onclick: () => go({ ...f, offset: Math.max(0, offset - PAGE) }) }, "‹ previous"),
    el("span", { id: "count" }, page.total ? `${offset + 1}–${last} of ${page.total}` : "no segments match"),
    el("button", { disabled: last >= page.total, onclick: () => go({ ...f, offset: offset + PAGE }) }, "next ›"));
  put(main, el("h1", {}, "Segments"), form, el("div", { class: "pager" }, bySignal), pager, table);
}
