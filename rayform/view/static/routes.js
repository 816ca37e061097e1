// rayform view: the pages of a store, read from the server's JSON routes. The route table maps
// an address (#/segments?site=lab, #/segment/ID?version=…&t=…, #/slice/ID, #/pack/SLICE/KEY) to
// its page; a page may return what to undo on leaving it (its key handler, its timers).
import { el, put, showError } from "./dom.js";
import { episodePage } from "./episode.js";
import { homePage } from "./home.js";
import { packPage } from "./pack.js";
import { segmentsPage } from "./segments.js";
import { slicePage } from "./slice.js";

const ROUTES = {
  home: (main) => homePage(main),
  segments: (main, params) => segmentsPage(main, params),
  segment: (main, params, [id]) => episodePage(main, id, params.get("version"), Number(params.get("t")) || 0),
  slice: (main, params, [id]) => slicePage(main, id),
  pack: (main, params, [sliceId, key]) => packPage(main, sliceId, key, params),
};

let teardown = null; // the open page's

async function route() {
  if (teardown) { teardown(); teardown = null; }
  document.getElementById("error").hidden = true;
  const main = document.getElementById("main");
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const [name, ...rest] = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  const page = ROUTES[name] ? name : "home";
  put(main, el("p", { class: "muted" }, "Loading…"));
  try {
    teardown = (await ROUTES[page](main, params, rest)) || null;
    main.dataset.page = page;
  } catch (e) {
    put(main);
    showError(e);
  }
}

window.addEventListener("hashchange", route);
route(); // a module runs once the document is parsed
