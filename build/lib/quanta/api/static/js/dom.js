// DOM helpers. Every string that comes from the API (names, params, errors) reaches the page only
// through text nodes (textContent) or setAttribute on a fixed list of harmless attributes; nothing
// here ever assigns innerHTML.

const SVG_NS = "http://www.w3.org/2000/svg";
const SAFE_ATTR = /^(class|id|title|hidden|href|type|name|value|placeholder|for|role|colspan|rowspan|disabled|autocomplete|aria-[a-z-]+|data-[a-z-]+|tabindex|style|min|max|step|rows|maxlength|pattern)$/;

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

/** h("div", {class: "x", onclick: fn}, "text", child, [more]) */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = String(v);
    else if (SAFE_ATTR.test(k)) {
      if (k === "href" && !/^(#|\/|\?)/.test(String(v))) continue; // only local links
      el.setAttribute(k, v === true ? "" : String(v));
    } else throw new Error(`h(): attribute ${k} not allowed`);
  }
  return append(el, children);
}

/** SVG element with numeric/string attributes; text children become text nodes. */
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  return append(el, children);
}

/** An SVG <title> (hover tooltip) holding plain text. */
export function stitle(text) {
  const t = document.createElementNS(SVG_NS, "title");
  t.textContent = String(text);
  return t;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

export function fmtNum(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return String(Number(v.toPrecision(digits)));
}

export function fmtDuration(sec) {
  if (sec === null || sec === undefined) return "—";
  if (sec < 60) return `${sec.toFixed(1)} s`;
  if (sec < 3600) return `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
  return `${Math.floor(sec / 3600)} h ${Math.round((sec % 3600) / 60)} min`;
}

export function fmtTime(ts) {
  if (!ts) return "—";
  const d = new Date(ts * 1000);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
}

/** Flatten nested params: {optimizer: {name: "sgd", momentum: 0.9}} -> {"optimizer.name": "sgd", ...}. */
export function flatten(obj, prefix = "", out = {}) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    out[prefix || "value"] = Array.isArray(obj) ? JSON.stringify(obj) : obj;
    return out;
  }
  for (const [k, v] of Object.entries(obj)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = Array.isArray(v) ? JSON.stringify(v) : v;
  }
  return out;
}

export function paramsText(params) {
  const flat = flatten(params || {});
  return Object.entries(flat)
    .map(([k, v]) => `${k}=${typeof v === "number" ? fmtNum(v) : String(v)}`)
    .join(", ");
}

/** Stable, distinct-ish colour for a trial id. */
export function trialColor(id, alpha = 1) {
  const hue = (Number(id) * 137.508) % 360;
  return `hsla(${hue.toFixed(1)}, 62%, 48%, ${alpha})`;
}

export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      fn(...args);
    }, ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}
