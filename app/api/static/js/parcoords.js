// Parallel coordinates of params versus metric. Nested params are flattened to dotted names
// ("optimizer.momentum"); a `choice` parameter gets a categorical axis with the spec's options in the
// spec's order (numbers included: {choice: [8, 16, 32]} is three options, not a range), other numbers a
// linear axis (log when the spec samples them log-uniformly, or they span decades), strings and
// booleans a categorical axis; a param a trial does not have (a branch of a choice it did not take)
// sits on the axis's "n/a" mark under the axis. The last axis is the trial's best metric.

import { s, stitle, h, replace, flatten, fmtNum } from "./dom.js";
import { categories, dimensions, optionKey, optionLabel } from "./space.js";

const TOP = 34;
const BOTTOM = 40;
const LEFT = 50;
const RIGHT = 60;
const NA_GAP = 16;

function trialMetric(t) {
  return t.best_metric ?? t.metric;
}

/** An axis for `values` (one per trial, or per point: pareto.js); `dim` is what the spec says about the parameter (or undefined). */
export function makeAxis(name, values, dim) {
  const present = values.filter((v) => v !== undefined && v !== null);
  const nums = present.filter((v) => typeof v === "number" && Number.isFinite(v));
  const missing = present.length < values.length;
  const logHint = dim?.kind === "numeric" && dim.log;
  if (dim?.kind !== "categorical" && present.length && nums.length === present.length) {
    let lo = Math.min(...nums);
    let hi = Math.max(...nums);
    const log = lo > 0 && (logHint ? hi / lo > 1.5 : hi / lo >= 100);
    if (lo === hi) {
      const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
      lo -= pad;
      hi += pad;
    }
    const f = log ? Math.log10 : (v) => v;
    const a = f(lo);
    const b = f(hi);
    return {
      name,
      kind: log ? "log" : "linear",
      missing,
      pos: (v) => (typeof v === "number" ? (f(v) - a) / (b - a) : null), // 0 = bottom, 1 = top
      ticks: log ? logTicks(lo, hi) : [lo, (lo + hi) / 2, hi],
    };
  }
  const cats = categories(dim, present);
  const index = new Map(cats.map((c, i) => [optionKey(c), i]));
  return {
    name,
    kind: "categorical",
    missing,
    pos: (v) => {
      if (v === undefined || v === null) return null;
      const i = index.get(optionKey(v));
      if (i === undefined) return null;
      return cats.length === 1 ? 0.5 : i / (cats.length - 1);
    },
    ticks: cats.map((c) => ({ value: c, label: optionLabel(c) })),
  };
}

function logTicks(lo, hi) {
  // The ends, and the powers of ten between them that are not crowding an end.
  const out = [lo];
  const span = Math.log10(hi) - Math.log10(lo);
  for (let e = Math.ceil(Math.log10(lo)); e <= Math.floor(Math.log10(hi)); e++) {
    const v = 10 ** e;
    if (Math.log10(v) - Math.log10(lo) > 0.12 * span && Math.log10(hi) - Math.log10(v) > 0.12 * span) out.push(v);
  }
  out.push(hi);
  return out;
}

/**
 * trials: [TrialOut]; metric: {name, goal, target}; bestId: trial id.
 * `onPick(trialId)` is called when a line is clicked; `space` (the spec's) marks log-scaled params.
 */
export function renderParcoords(container, trials, metric, bestId, onPick, space = null) {
  const withMetric = trials.filter((t) => typeof trialMetric(t) === "number");
  if (!withMetric.length) {
    replace(container, h("div", { class: "empty" }, "No trial has reported the metric yet."));
    return;
  }
  const flat = withMetric.map((t) => flatten(t.params || {}));
  const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
  // Drop params that never vary (they tell nothing) unless that would leave no axis at all.
  const varying = keys.filter((k) => new Set(flat.map((f) => JSON.stringify(f[k] ?? null))).size > 1);
  const paramKeys = varying.length ? varying : keys;
  const mname = (metric && metric.name) || "metric";
  const dims = dimensions(space);
  const axes = paramKeys.map((k) => makeAxis(k, flat.map((f) => f[k]), dims.get(k)));
  const mAxis = makeAxis(mname, withMetric.map(trialMetric));
  mAxis.isMetric = true;
  axes.push(mAxis);

  const width = Math.max(420, Math.floor(container.clientWidth || 800));
  const height = 300;
  const anyMissing = axes.some((a) => a.missing);
  const plotH = height - TOP - BOTTOM - (anyMissing ? NA_GAP : 0);
  const gap = (width - LEFT - RIGHT) / Math.max(1, axes.length - 1);
  const ax = (i) => LEFT + i * gap;
  const ypos = (axis, v) => {
    const p = axis.pos(v);
    return p === null || Number.isNaN(p) ? TOP + plotH + NA_GAP : TOP + (1 - p) * plotH;
  };

  // Colour by metric: better is darker blue.
  const mvals = withMetric.map(trialMetric);
  const mlo = Math.min(...mvals);
  const mhi = Math.max(...mvals);
  const goodness = (v) => {
    if (mhi === mlo) return 1;
    const g = (v - mlo) / (mhi - mlo);
    return metric && metric.goal === "minimize" ? 1 - g : g;
  };

  const svg = s("svg", { class: "parcoords", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const linesG = s("g", { class: "lines" });
  const order = withMetric
    .map((t, i) => ({ t, i }))
    .sort((p, q) => {
      const r = (x) => (x.t.id === bestId ? 2 : x.t.status === "killed" ? 1 : 0);
      return r(p) - r(q) || goodness(trialMetric(p.t)) - goodness(trialMetric(q.t));
    });
  for (const { t, i } of order) {
    const pts = axes.map((a, j) => [ax(j), ypos(a, a.isMetric ? trialMetric(t) : flat[i][a.name])]);
    const d = pts.map((p, j) => `${j ? "L" : "M"}${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" ");
    const g = goodness(trialMetric(t));
    let cls = "pline";
    let stroke = `hsla(215, 70%, ${Math.round(78 - 46 * g)}%, ${(0.45 + 0.5 * g).toFixed(2)})`;
    if (t.status === "killed") {
      cls += " killed";
      stroke = "rgba(214,39,40,0.75)";
    }
    if (t.id === bestId) {
      cls += " best";
      stroke = "#d98c00";
    }
    const path = s("path", { d, class: cls, stroke, fill: "none", "data-trial-id": t.id });
    const desc = Object.entries(flat[i])
      .map(([k, v]) => `${k}=${typeof v === "number" ? fmtNum(v) : String(v)}`)
      .join(", ");
    path.appendChild(stitle(`trial ${t.id} (${t.status}): ${mname} ${fmtNum(trialMetric(t))}; ${desc}`));
    if (onPick) path.addEventListener("click", () => onPick(t.id));
    linesG.appendChild(path);
  }

  const axesG = s("g", { class: "axes" });
  axes.forEach((a, j) => {
    const x = ax(j);
    const g = s("g", { class: a.isMetric ? "paxis metric" : "paxis", "data-param": a.isMetric ? null : a.name, "data-kind": a.kind });
    g.appendChild(s("line", { x1: x, x2: x, y1: TOP, y2: TOP + plotH }));
    const label = s(
      "text",
      { x, y: TOP - 14, "text-anchor": j === 0 ? "start" : j === axes.length - 1 ? "end" : "middle", class: "aname" },
      a.name.length > 22 ? `${a.name.slice(0, 21)}…` : a.name,
    );
    // The hover title sits beside the text (in a group), so the label's own text is only the name.
    g.appendChild(
      s("g", { class: "alabel" }, stitle(`${a.name} (${a.kind}${a.isMetric ? `, best per trial, ${metric?.goal || ""}` : ""})`), label),
    );
    for (const tv of a.ticks) {
      const categorical = typeof tv === "object";
      const y = ypos(a, categorical ? tv.value : tv);
      g.appendChild(s("line", { x1: x - 3, x2: x + 3, y1: y, y2: y }));
      const text = !categorical ? fmtNum(tv, 3) : tv.label.length > 12 ? `${tv.label.slice(0, 11)}…` : tv.label;
      g.appendChild(s("text", { x: x + 5, y: y + 3, class: "tick" }, text));
    }
    if (a.missing) g.appendChild(s("text", { x: x + 5, y: TOP + plotH + NA_GAP + 3, class: "tick na" }, "n/a"));
    axesG.appendChild(g);
  });

  svg.appendChild(linesG);
  svg.appendChild(axesG);
  const note = trials.length - withMetric.length;
  const legend = h(
    "div",
    { class: "legend" },
    h("span", { class: "key key-best" }),
    "best trial",
    h("span", { class: "key key-killed" }),
    "killed",
    h("span", { class: "key key-grad" }),
    `lighter → darker: worse → better ${mname}`,
    note > 0 ? ` · ${note} trial(s) without a metric not drawn` : "",
  );
  replace(container, svg, legend);
}
