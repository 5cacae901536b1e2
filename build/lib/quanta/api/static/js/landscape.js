// Parameters versus metric: importance bars (from /importance: a random forest's permutation
// importance), a slice plot per parameter (each trial's value of that parameter against its metric),
// and a contour plot of any two (from /landscape: the forest's prediction over a grid, in eight bands,
// with the trials it was fitted on as dots). A `choice` parameter is categorical in all three: its
// options, in the spec's order, each a column (or row) of its own, never a numeric range. Plain SVG;
// every string reaches the page as text.

import { s, stitle, h, replace, flatten, fmtNum } from "./dom.js";
import { categories, dimensions, optionKey, optionLabel } from "./space.js";

const BANDS = 8;

/** 0 (worst) .. 1 (best) for a metric value between lo and hi, as the goal says. */
function goodnessOf(metric, lo, hi) {
  return (v) => {
    if (hi === lo) return 1;
    const g = (v - lo) / (hi - lo);
    return metric && metric.goal === "minimize" ? 1 - g : g;
  };
}

/** A spread of -0.5..0.5 that is the same for a trial on every redraw (dots of one option apart). */
function jitter(id) {
  const x = Math.sin(Number(id) * 12.9898) * 43758.5453;
  return x - Math.floor(x) - 0.5;
}

function shade(g, alpha = 1) {
  return `hsla(215, 70%, ${Math.round(88 - 58 * g)}%, ${alpha})`;
}

// ---------------------------------------------------------------- importance

/** data: ImportanceOut. `onPick(name)` is called when a bar is clicked. */
export function renderImportance(container, data, onPick) {
  const params = (data && data.params) || [];
  if (!params.length) {
    replace(container, h("div", { class: "empty" }, data?.note || "No importance yet."));
    return;
  }
  const width = Math.max(360, Math.floor(container.clientWidth || 600));
  const rowH = 22;
  const labelW = Math.min(220, Math.max(90, Math.max(...params.map((p) => p.name.length)) * 7 + 12));
  const barW = width - labelW - 70;
  const height = params.length * rowH + 8;
  const svg = s("svg", { class: "importance", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  params.forEach((p, i) => {
    const y = 4 + i * rowH;
    const w = Math.max(1, barW * Math.max(0, Math.min(1, p.importance)));
    const g = s("g", { class: "imp-bar", "data-param": p.name, "data-importance": p.importance.toFixed(4) });
    g.appendChild(stitle(`${p.name}: ${(100 * p.importance).toFixed(1)} % (± ${(100 * p.std).toFixed(1)})`));
    g.appendChild(s("text", { x: labelW - 6, y: y + 14, "text-anchor": "end", class: "imp-name" }, p.name.length > 30 ? `${p.name.slice(0, 29)}…` : p.name));
    g.appendChild(s("rect", { x: labelW, y: y + 3, width: w.toFixed(1), height: rowH - 8, rx: 2, class: "imp-rect" }));
    g.appendChild(s("text", { x: labelW + w + 6, y: y + 14, class: "imp-value" }, `${(100 * p.importance).toFixed(1)} %`));
    if (onPick) g.addEventListener("click", () => onPick(p.name));
    svg.appendChild(g);
  });
  const fit = typeof data.r2 === "number" ? `, forest R² ${fmtNum(data.r2, 3)}` : "";
  const partial = data.trials_partial ? ` (${data.trials_partial} stopped short of their steps, at their last value)` : "";
  replace(container, svg, h("div", { class: "hint" }, `${data.method}, ${data.trials_used} trials${partial}${fit}`));
}

// ---------------------------------------------------------------- axes

function numericScale(lo, hi, log, a, b) {
  if (lo === hi) {
    const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const useLog = log && lo > 0;
  const f = useLog ? Math.log10 : (v) => v;
  const fa = f(lo);
  const fb = f(hi);
  const map = (v) => a + ((f(v) - fa) / (fb - fa)) * (b - a);
  const ticks = useLog ? [lo, Math.sqrt(lo * hi), hi] : [lo, (lo + hi) / 2, hi];
  return { map, ticks, lo, hi };
}

// ---------------------------------------------------------------- slices

/**
 * trials: [TrialOut] (those with a metric are drawn); order: parameter names to draw first (by
 * importance); space: the spec's (log-scaled axes). One small plot per parameter that varies.
 */
export function renderSlices(container, trials, metric, space, order = []) {
  const withMetric = trials.filter((t) => typeof t.metric === "number");
  if (!withMetric.length) {
    replace(container, h("div", { class: "empty" }, "No trial has reported the metric yet."));
    return;
  }
  const flat = withMetric.map((t) => flatten(t.params || {}));
  const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))];
  const varying = keys.filter((k) => new Set(flat.map((f) => JSON.stringify(f[k] ?? null))).size > 1);
  varying.sort((a, b) => {
    const ia = order.indexOf(a);
    const ib = order.indexOf(b);
    return (ia < 0 ? 1e9 : ia) - (ib < 0 ? 1e9 : ib) || a.localeCompare(b);
  });
  const dims = dimensions(space);
  const values = withMetric.map((t) => t.metric);
  const mlo = Math.min(...values);
  const mhi = Math.max(...values);
  const good = goodnessOf(metric, mlo, mhi);
  const W = 230;
  const H = 170;
  const L = 46;
  const B = 30;
  const T = 18;
  const plots = varying.map((key) => {
    const xs = flat.map((f) => f[key]);
    const present = xs.filter((v) => v !== undefined && v !== null);
    const nums = present.filter((v) => typeof v === "number");
    const dim = dims.get(key);
    const categorical = dim?.kind === "categorical" || !nums.length || nums.length !== present.length;
    const svg = s("svg", { class: "slice", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "data-param": key, "data-kind": categorical ? "categorical" : "numeric" });
    const y = numericScale(mlo, mhi, false, H - B, T);
    let xmap;
    let xticks;
    if (!categorical) {
      const sc = numericScale(Math.min(...nums), Math.max(...nums), dim?.kind === "numeric" && dim.log, L, W - 10);
      xmap = (v) => (typeof v === "number" ? sc.map(v) : null);
      xticks = sc.ticks.map((v) => [sc.map(v), fmtNum(v, 3)]);
    } else {
      // One column per option; a trial's dot spread across its column so that equal values stay apart.
      const cats = categories(dim, present);
      const index = new Map(cats.map((c, i) => [optionKey(c), i]));
      const step = (W - 10 - L) / Math.max(1, cats.length);
      xmap = (v, id) => {
        const i = v === undefined || v === null ? undefined : index.get(optionKey(v));
        return i === undefined ? null : L + step * (i + 0.5 + 0.5 * jitter(id));
      };
      xticks = cats.map((c, i) => {
        const label = optionLabel(c);
        return [L + step * (i + 0.5), label.length > 8 ? `${label.slice(0, 7)}…` : label];
      });
    }
    svg.appendChild(s("text", { x: L, y: 12, class: "slice-title" }, key.length > 28 ? `${key.slice(0, 27)}…` : key));
    svg.appendChild(s("line", { x1: L, x2: W - 10, y1: H - B, y2: H - B, class: "axis" }));
    svg.appendChild(s("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
    if (categorical) {
      for (let i = 1; i < xticks.length; i++) {
        const px = (xticks[i - 1][0] + xticks[i][0]) / 2;
        svg.appendChild(s("line", { x1: px, x2: px, y1: T, y2: H - B, class: "sep" }));
      }
    }
    for (const [px, label] of xticks) svg.appendChild(s("text", { x: px, y: H - B + 14, "text-anchor": "middle", class: "tick xtick" }, label));
    for (const v of y.ticks) svg.appendChild(s("text", { x: L - 4, y: y.map(v) + 3, "text-anchor": "end", class: "tick" }, fmtNum(v, 3)));
    withMetric.forEach((t, i) => {
      const px = xmap(xs[i], t.id);
      if (px === null) return;
      const c = s("circle", { cx: px.toFixed(1), cy: y.map(t.metric).toFixed(1), r: 3.5, class: `pt st-${t.status}`, fill: shade(good(t.metric), 0.85), "data-trial-id": t.id });
      c.appendChild(stitle(`trial ${t.id} (${t.status}): ${key}=${typeof xs[i] === "number" ? fmtNum(xs[i]) : String(xs[i])}, ${metric?.name || "metric"} ${fmtNum(t.metric)}`));
      svg.appendChild(c);
    });
    return svg;
  });
  if (!plots.length) {
    replace(container, h("div", { class: "empty" }, "No parameter varies between the trials."));
    return;
  }
  replace(container, h("div", { class: "slices" }, ...plots), h("div", { class: "hint" }, `last reported ${metric?.name || "metric"} per trial (y) against each parameter (x); darker = better`));
}

// ---------------------------------------------------------------- contour

/** land: LandscapeOut for two parameters. */
export function renderContour(container, land, metric) {
  if (!land || !land.y || !land.z || !land.z.length) {
    replace(container, h("div", { class: "empty" }, land?.note || "Pick two parameters."));
    return;
  }
  const width = Math.max(360, Math.min(620, Math.floor(container.clientWidth || 520)));
  const height = Math.round(width * 0.72);
  const L = 62;
  const B = 40;
  const T = 10;
  const R = 14;
  const zs = land.z.flat();
  const pvals = land.points.map((p) => p[2]);
  const lo = Math.min(...zs, ...pvals);
  const hi = Math.max(...zs, ...pvals);
  const good = goodnessOf(metric, lo, hi);
  const band = (v) => Math.min(BANDS - 1, Math.floor(good(v) * BANDS)) / (BANDS - 1);

  // A numeric axis: cells from halfway to halfway between grid positions (in the axis's own scale: log
  // for log axes), coloured in bands like a contour map. A categorical axis (a `choice`): one block per
  // option with a gap between blocks, coloured by the value itself (options have no order to band along),
  // the trials' dots spread across their option's block.
  const anyCategorical = land.x.kind === "categorical" || land.y.kind === "categorical";
  const colour = (v) => shade(anyCategorical ? good(v) : band(v));
  const edges = (axis, a, b) => {
    const n = axis.values.length;
    if (axis.kind === "categorical") {
      const step = (b - a) / n;
      const gap = Math.min(3, Math.abs(step) * 0.06) * Math.sign(step);
      return {
        centre: (i) => a + step * (i + 0.5),
        cell: (i) => [a + step * i + gap, a + step * (i + 1) - gap],
        pos: (v, id) => a + step * (v + 0.5 + 0.6 * jitter(id)),
      };
    }
    const f = axis.log ? Math.log10 : (v) => v;
    const fv = axis.values.map(f);
    const e = [fv[0]];
    for (let i = 1; i < n; i++) e.push((fv[i - 1] + fv[i]) / 2);
    e.push(fv[n - 1]);
    const span = fv[n - 1] - fv[0] || 1;
    const toPx = (u) => a + ((u - fv[0]) / span) * (b - a);
    return { centre: (i) => toPx(fv[i]), cell: (i) => [toPx(e[i]), toPx(e[i + 1])], pos: (v) => toPx(f(v)) };
  };
  const ex = edges(land.x, L, width - R);
  const ey = edges(land.y, height - B, T);
  const svg = s("svg", {
    class: "contour",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "data-x": land.x.name,
    "data-y": land.y.name,
    "data-x-kind": land.x.kind,
    "data-y-kind": land.y.kind,
  });
  const label = (axis, i) => (axis.kind === "categorical" ? axis.labels[i] ?? String(i) : fmtNum(axis.values[i]));
  const cells = s("g", { class: "cells" });
  land.z.forEach((row, j) => {
    row.forEach((v, i) => {
      const [x0, x1] = ex.cell(i);
      const [y0, y1] = ey.cell(j);
      const rect = s("rect", {
        x: Math.min(x0, x1).toFixed(1),
        y: Math.min(y0, y1).toFixed(1),
        width: Math.abs(x1 - x0).toFixed(1),
        height: Math.abs(y1 - y0).toFixed(1),
        fill: colour(v),
        class: "cell",
      });
      rect.appendChild(stitle(`${land.x.name}=${label(land.x, i)}, ${land.y.name}=${label(land.y, j)}: predicted ${metric?.name || "metric"} ${fmtNum(v)}`));
      cells.appendChild(rect);
      // Two categorical axes make a small table: each block says its value.
      if (land.x.kind === "categorical" && land.y.kind === "categorical" && Math.abs(x1 - x0) > 44 && Math.abs(y1 - y0) > 18) {
        const dark = good(v) > 0.55;
        cells.appendChild(s("text", { x: ((x0 + x1) / 2).toFixed(1), y: ((y0 + y1) / 2 + 4).toFixed(1), "text-anchor": "middle", class: `cell-value${dark ? " on-dark" : ""}` }, fmtNum(v, 3)));
      }
    });
  });
  svg.appendChild(cells);
  const pts = s("g", { class: "points" });
  land.points.forEach(([px, py, v], k) => {
    if (px === null || py === null) return;
    const c = s("circle", { cx: ex.pos(px, k).toFixed(1), cy: ey.pos(py, k + 0.5).toFixed(1), r: 3.5, class: "pt", fill: shade(good(v)), stroke: "#fff" });
    const at = (axis, p) => (axis.kind === "categorical" ? axis.labels[p] ?? String(p) : fmtNum(p));
    c.appendChild(stitle(`trial: ${land.x.name}=${at(land.x, px)}, ${land.y.name}=${at(land.y, py)}, ${metric?.name || "metric"} ${fmtNum(v)}`));
    pts.appendChild(c);
  });
  svg.appendChild(pts);
  const tickIdx = (axis) => (axis.kind === "categorical" ? axis.values.map((_, i) => i) : [0, Math.floor((axis.values.length - 1) / 2), axis.values.length - 1]);
  const tickText = (axis, i) => (axis.kind === "categorical" ? axis.labels[i] ?? String(i) : fmtNum(axis.values[i], 3));
  for (const i of tickIdx(land.x)) svg.appendChild(s("text", { x: ex.centre(i), y: height - B + 14, "text-anchor": "middle", class: "tick xtick" }, tickText(land.x, i)));
  for (const j of tickIdx(land.y)) svg.appendChild(s("text", { x: L - 4, y: ey.centre(j) + 3, "text-anchor": "end", class: "tick ytick" }, tickText(land.y, j)));
  svg.appendChild(s("text", { x: (L + width - R) / 2, y: height - 6, "text-anchor": "middle", class: "aname" }, land.x.name));
  svg.appendChild(s("text", { x: 12, y: (T + height - B) / 2, "text-anchor": "middle", class: "aname", transform: `rotate(-90 12 ${(T + height - B) / 2})` }, land.y.name));
  replace(
    container,
    svg,
    h(
      "div",
      { class: "hint" },
      `predicted ${metric?.name || "metric"} (random forest at full training, averaged over the other parameters), ` +
        (anyCategorical ? `one block per option of a choice, from ${fmtNum(lo)} to ${fmtNum(hi)}` : `in ${BANDS} bands from ${fmtNum(lo)} to ${fmtNum(hi)}`) +
        "; darker = better; dots: the trials it was fitted on",
    ),
  );
}
