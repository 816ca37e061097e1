// The one plotting module every chart draws with: a canvas sized for the screen's pixels, the
// range of some values, scales, lines that break at missing values, marks and labels.

export const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
  "#bcbd22", "#7f7f7f"];

export function color(k) { return k < COLORS.length ? COLORS[k] : `hsl(${(k * 47) % 360}, 65%, 42%)`; }

export function ratio() { return window.devicePixelRatio || 1; }

// a canvas of its laid-out width (at least minWidth) and cssHeight, in device pixels
export function sized(canvas, cssHeight, minWidth = 200) {
  const r = ratio(), w = Math.max(minWidth, canvas.clientWidth) * r, h = cssHeight * r;
  canvas.width = w; canvas.height = h;
  return { g: canvas.getContext("2d"), w, h, r };
}

// a canvas drawn once laid out (its width is known then)
export function later(canvas, cssHeight, draw, minWidth = 300) {
  canvas.style.height = `${cssHeight}px`;
  requestAnimationFrame(() => draw(sized(canvas, cssHeight, minWidth)));
  return canvas;
}

// [lo, hi] of the values of some rows (nulls skipped), never empty nor a point
export function extent(rows) {
  let lo = Infinity, hi = -Infinity;
  for (const row of rows) for (const v of row) if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (!isFinite(lo)) { lo = -1; hi = 1; }
  if (hi - lo < 1e-12) { hi += 1; lo -= 1; }
  return [lo, hi];
}

// a linear map of [d0, d1] onto [r0, r1]
export function scale(d0, d1, r0, r1) {
  const span = d1 - d0;
  return (v) => (Math.abs(span) > 1e-12 ? r0 + ((v - d0) / span) * (r1 - r0) : (r0 + r1) / 2);
}

// one line through (x(i), y(values[i])), broken where a value is null
export function line(g, values, x, y, stroke, width) {
  g.strokeStyle = stroke; g.lineWidth = width; g.beginPath();
  let open = false;
  values.forEach((v, i) => {
    if (v === null) { open = false; return; }
    if (open) g.lineTo(x(i), y(v)); else { g.moveTo(x(i), y(v)); open = true; }
  });
  g.stroke();
}

export function segment(g, x0, y0, x1, y1, stroke, width, dash = []) {
  g.strokeStyle = stroke; g.lineWidth = width; g.setLineDash(dash);
  g.beginPath(); g.moveTo(x0, y0); g.lineTo(x1, y1); g.stroke(); g.setLineDash([]);
}

// a dot: filled, or hollow (drawn in grey)
export function dot(g, x, y, radius, fill, hollow = false) {
  g.beginPath(); g.arc(x, y, radius, 0, 7);
  if (hollow) { g.strokeStyle = "#999"; g.stroke(); } else { g.fillStyle = fill; g.fill(); }
}

export function text(g, s, x, y, fill, px) {
  g.fillStyle = fill; g.font = `${px * ratio()}px sans-serif`; g.fillText(s, x, y);
}
