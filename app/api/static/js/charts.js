// Line charts drawn with the vendored uPlot (global `uPlot`, from /static/vendor/uPlot.iife.min.js):
// best-so-far metric versus time, and every trial's learning curve.

import { h, replace, fmtNum, trialColor } from "./dom.js";
import { changeMarks } from "./lineage.js";

const BEST = "#d98c00";
const KILLED = "#d62728";
const FAILED = "#7f1d1d";

function sizeOf(el, height) {
  return { width: Math.max(280, Math.floor(el.clientWidth || 600)), height };
}

/** A uPlot chart that follows its container's width, and can be fed new data. */
class Chart {
  constructor(container, height) {
    this.container = container;
    this.height = height;
    this.plot = null;
    this.key = null;
    this.ro = new ResizeObserver(() => {
      if (this.plot) {
        const { width, height } = sizeOf(this.container, this.height);
        if (width !== this.plot.width) this.plot.setSize({ width, height });
      }
    });
    this.ro.observe(container);
  }

  /** Rebuild when the series set changed (`key`), otherwise only swap the data. */
  draw(key, makeOpts, data) {
    if (this.plot && key === this.key) {
      this.plot.setData(data);
      this.container.dataset.points = String(data[0].length);
      return this.plot;
    }
    this.destroy();
    replace(this.container);
    const opts = makeOpts();
    Object.assign(opts, sizeOf(this.container, this.height));
    this.plot = new uPlot(opts, data, this.container);
    this.key = key;
    this.container.dataset.series = String(opts.series.length - 1); // drawn series (for tests and a11y)
    this.container.dataset.points = String(data[0].length);
    return this.plot;
  }

  empty(message) {
    this.destroy();
    this.container.dataset.series = "0";
    replace(this.container, h("div", { class: "empty" }, message));
  }

  destroy() {
    if (this.plot) this.plot.destroy();
    this.plot = null;
    this.key = null;
  }

  dispose() {
    this.destroy();
    this.ro.disconnect();
  }
}

function axisFont() {
  return { stroke: "#444", grid: { stroke: "#eee", width: 1 }, ticks: { stroke: "#ddd", width: 1 } };
}

/** Best-so-far metric versus seconds since the search started (a step line), with the target. */
export class BestChart extends Chart {
  constructor(container) {
    super(container, 240);
  }

  update(points, metric, untilSeconds) {
    const pts = (points || []).filter((p) => p && p[1] !== null && p[1] !== undefined);
    if (!pts.length) return this.empty("No metric reported yet.");
    const xs = pts.map((p) => p[0]);
    const ys = pts.map((p) => p[1]);
    if (untilSeconds && untilSeconds > xs[xs.length - 1]) {
      xs.push(untilSeconds); // the best holds until now (or the end of the search)
      ys.push(ys[ys.length - 1]);
    }
    const hasTarget = metric && metric.target !== null && metric.target !== undefined;
    const data = [xs, ys];
    if (hasTarget) data.push(xs.map(() => metric.target));
    const name = (metric && metric.name) || "metric";
    const key = `best|${name}|${hasTarget}`;
    this.draw(
      key,
      () => ({
        class: "chart-best",
        legend: { show: true, live: true },
        cursor: { drag: { x: true, y: false } },
        scales: { x: { time: false } },
        axes: [
          { ...axisFont(), label: "seconds since start", values: (u, v) => v.map((x) => fmtNum(x, 3)) },
          { ...axisFont(), label: `best ${name}`, size: 60, values: (u, v) => v.map((x) => fmtNum(x, 3)) },
        ],
        series: [
          { label: "t (s)", value: (u, v) => (v === null ? "—" : fmtNum(v, 3)) },
          {
            label: `best ${name}`,
            stroke: BEST,
            width: 2.5,
            fill: "rgba(217,140,0,0.08)",
            paths: uPlot.paths.stepped({ align: 1 }),
            points: { show: true, size: 5 },
            value: (u, v) => (v === null ? "—" : fmtNum(v)),
          },
          ...(hasTarget
            ? [{ label: "target", stroke: "#2a9d8f", width: 1.5, dash: [6, 4], points: { show: false } }]
            : []),
        ],
      }),
      data,
    );
  }
}

function curveStyle(id, status, bestId) {
  if (id === bestId) return { stroke: BEST, width: 3.2, kind: "best" };
  if (status === "killed") return { stroke: KILLED, width: 1.6, dash: [7, 4], kind: "killed" };
  if (status === "failed") return { stroke: FAILED, width: 1.4, dash: [2, 3], kind: "failed" };
  if (status === "running") return { stroke: trialColor(id, 0.95), width: 1.6, kind: "running" };
  return { stroke: trialColor(id, 0.5), width: 1.1, kind: "other" };
}

/** Every trial's learning curve (objective versus step); the best and the killed stand out. */
export class CurvesChart extends Chart {
  constructor(container, info) {
    super(container, 300);
    this.info = info; // an element showing the hovered trial
    this.series = [];
  }

  update(curves, bestId, metric, labels = {}) {
    const trials = (curves && curves.trials) || {};
    const status = (curves && curves.status) || {};
    let ids = Object.keys(trials)
      .map(Number)
      .filter((id) => (trials[id] || []).length > 0);
    if (!ids.length) return this.empty("No learning curves yet.");
    // Draw order: ordinary trials first, then killed/failed, the best last (on top).
    const rank = (id) => (id === bestId ? 3 : status[id] === "killed" || status[id] === "failed" ? 2 : 1);
    ids.sort((a, b) => rank(a) - rank(b) || a - b);
    const tables = ids.map((id) => {
      const pts = trials[id].filter((p) => p && p[1] !== null).sort((a, b) => a[0] - b[0]);
      return [pts.map((p) => p[0]), pts.map((p) => p[1])];
    });
    const data = uPlot.join(tables);
    const name = (metric && metric.name) || "metric";
    this.series = ids.map((id) => ({ id, status: status[id], ...curveStyle(id, status[id], bestId) }));
    const key = `curves|${name}|` + this.series.map((x) => `${x.id}:${x.kind}`).join(",");
    const info = this.info;
    const series = this.series;
    this.draw(
      key,
      () => ({
        class: "chart-curves",
        legend: { show: false },
        focus: { alpha: 0.25 },
        cursor: { focus: { prox: 24 }, drag: { x: true, y: false } },
        scales: { x: { time: false } },
        axes: [
          { ...axisFont(), label: "step" },
          { ...axisFont(), label: name, size: 60, values: (u, v) => v.map((x) => fmtNum(x, 3)) },
        ],
        series: [
          {},
          ...series.map((x) => ({
            label: `trial ${x.id}`,
            stroke: x.stroke,
            width: x.width,
            dash: x.dash,
            spanGaps: true,
            points: { show: false },
          })),
        ],
        hooks: {
          setSeries: [
            (u, idx) => {
              if (!info) return;
              if (idx === null || idx === undefined || !series[idx - 1]) {
                info.textContent = "Hover a curve to see its trial.";
                return;
              }
              const x = series[idx - 1];
              const ys = u.data[idx];
              let last = null;
              for (let i = ys.length - 1; i >= 0; i--) if (ys[i] !== null && ys[i] !== undefined) { last = ys[i]; break; }
              const extra = labels[x.id] ? ` — ${labels[x.id]}` : "";
              info.textContent = `trial ${x.id} (${x.status || "?"}${x.kind === "best" ? ", best" : ""}): last ${name} ${fmtNum(last)}${extra}`;
            },
          ],
        },
      }),
      data,
    );
  }
}

/** One trial's reported values of one metric versus step (the trial page), with the target when it is the objective. */
export class TrialChart extends Chart {
  constructor(container) {
    super(container, 280);
  }

  /**
   * points: [[step, value], ...]; target: a number or null; changes: the trial's config changes
   * (ConfigChangeOut: step, values, cause, source_id), drawn as marks at their steps with their values.
   */
  update(points, name, target, changes = []) {
    this.changes = changes || [];
    const pts = (points || []).filter((p) => p && typeof p[1] === "number").sort((a, b) => a[0] - b[0]);
    if (!pts.length) return this.empty(`No ${name || "metric"} reported yet.`);
    const xs = pts.map((p) => p[0]);
    const data = [xs, pts.map((p) => p[1])];
    const hasTarget = typeof target === "number";
    if (hasTarget) data.push(xs.map(() => target));
    this.draw(
      `trial|${name}|${hasTarget}`,
      () => ({
        class: "chart-trial",
        legend: { show: true, live: true },
        cursor: { drag: { x: true, y: false } },
        scales: { x: { time: false } },
        // The change points follow the x scale (zoom, resize): placed again after each draw.
        hooks: { draw: [(u) => changeMarks(u.over, this.changes, (step) => u.valToPos(step, "x"))] },
        axes: [
          { ...axisFont(), label: "step" },
          { ...axisFont(), label: name, size: 60, values: (u, v) => v.map((x) => fmtNum(x, 3)) },
        ],
        series: [
          { label: "step" },
          { label: name, stroke: "#2f5fd0", width: 2, points: { show: pts.length < 60, size: 4 }, value: (u, v) => (v === null ? "—" : fmtNum(v)) },
          ...(hasTarget ? [{ label: "target", stroke: "#2a9d8f", width: 1.5, dash: [6, 4], points: { show: false } }] : []),
        ],
      }),
      data,
    );
  }
}

/** Several searches' best-so-far curves on one time axis (the compare page): one stepped line each. */
export class CompareChart extends Chart {
  constructor(container) {
    super(container, 320);
  }

  /** runs: [{label, points: [[seconds, best], ...], until: seconds or null}]; yLabel names the metric. */
  update(runs, yLabel) {
    const drawn = runs.filter((r) => (r.points || []).some((p) => p && typeof p[1] === "number"));
    if (!drawn.length) return this.empty("No search has reported its metric yet.");
    const tables = drawn.map((r) => {
      const pts = r.points.filter((p) => p && typeof p[1] === "number");
      const xs = pts.map((p) => p[0]);
      const ys = pts.map((p) => p[1]);
      if (r.until && r.until > xs[xs.length - 1]) {
        xs.push(r.until); // each best holds until its search ended (or now)
        ys.push(ys[ys.length - 1]);
      }
      return [xs, ys];
    });
    const data = uPlot.join(tables);
    this.draw(
      `compare|${yLabel}|${drawn.map((r) => r.label).join("|")}`,
      () => ({
        class: "chart-compare",
        legend: { show: true, live: true },
        cursor: { drag: { x: true, y: false } },
        scales: { x: { time: false, range: (u, min, max) => [0, max > 0 ? max : 1] } }, // from each search's start
        axes: [
          { ...axisFont(), label: "seconds since start", values: (u, v) => v.map((x) => fmtNum(x, 3)) },
          { ...axisFont(), label: yLabel, size: 60, values: (u, v) => v.map((x) => fmtNum(x, 3)) },
        ],
        series: [
          { label: "t (s)", value: (u, v) => (v === null ? "—" : fmtNum(v, 3)) },
          ...drawn.map((r, i) => ({
            label: r.label,
            stroke: compareColor(i),
            width: 2.2,
            spanGaps: true,
            paths: uPlot.paths.stepped({ align: 1 }),
            points: { show: true, size: 4 },
            value: (u, v) => (v === null ? "—" : fmtNum(v)),
          })),
        ],
      }),
      data,
    );
    return drawn.length;
  }
}

const COMPARE = ["#2f5fd0", "#d98c00", "#2a9d8f", "#b42323", "#7c3aed", "#0f766e", "#a16207", "#be185d"];

/** The colour of the i-th search on the compare page (the chart's line and its column's key). */
export function compareColor(i) {
  return COMPARE[i % COMPARE.length];
}
