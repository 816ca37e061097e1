// The home page: the store's sites and slices.
import { api, el, put, q } from "./dom.js";

export async function homePage(main) {
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
