// How the pages write numbers, sizes, codecs and links.
import { q } from "./dom.js";

export function seconds(v) { return v === null || v === undefined ? "-" : `${Number(v).toFixed(1)} s`; }

export function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function number(v) {
  return v === null ? "–" : Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2) : v.toFixed(3);
}

export function codecOf(p) {
  const videos = Object.entries(p.video || {});
  if (!videos.length) return p.codec;
  const quality = (v) => (v.kept ? " (kept)" : `${v.crf === null ? "" : ` crf ${v.crf}`}`
    + `${v.crf_by && v.crf_by !== "given" ? ` (chosen: ${v.crf_by})` : ""}`)
    + (v.psnr ? `, ${v.psnr.toFixed(1)} dB${v.jpeg_psnr ? ` (JPEG q90 ${v.jpeg_psnr.toFixed(1)})` : ""}` : "");
  return videos.map(([n, v]) => `${n}: ${v.codec}${quality(v)}`).join("; ");
}

export function segmentLink(id, version) { return `#/segment/${encodeURIComponent(id)}${q({ version })}`; }
