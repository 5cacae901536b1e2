// Per-device timeline (Gantt) of a search: which trial ran on which device in each quantum, packed
// stretches (two trials sharing a device) drawn half-height and hatched, and the time a trial spent
// parked (suspended between its quanta) as a thin strip under the lane of the device it last ran on.

import { s, stitle, h, replace, fmtNum, trialColor } from "./dom.js";

const RUN_H = 30; // height of the band where quanta run
const PARK_ROW = 4; // height of one parked strip
const MAX_PARK_ROWS = 5;
const LANE_GAP = 10;
const LEFT = 70;
const RIGHT = 12;
const TOP = 8;
const AXIS_H = 26;

/** A list field that may come as an array or a comma-separated string ("cpu:0,cpu:1"). */
function devList(v) {
  if (Array.isArray(v)) return v.map((d) => String(d).trim()).filter(Boolean);
  return String(v ?? "")
    .split(",")
    .map((d) => d.trim())
    .filter(Boolean);
}

function natural(a, b) {
  return a.localeCompare(b, undefined, { numeric: true });
}

function niceStep(span, target) {
  const raw = span / Math.max(1, target);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 5, 10]) if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

/** Greedy interval packing: gives each [a, b] a row so rows never overlap. */
function assignRows(intervals) {
  const ends = [];
  for (const iv of intervals.sort((p, q) => p.a - q.a)) {
    let row = ends.findIndex((e) => e <= iv.a);
    if (row < 0) {
      row = ends.length;
      ends.push(iv.b);
    } else ends[row] = iv.b;
    iv.row = row;
  }
  return ends.length;
}

/**
 * Render into `container`.
 * timeline: {items: [{trial_id, devices, started_at, ended_at, packed_with}], t0}
 * trials: Map id -> TrialOut (for status and params, may be partial)
 * opts: {devices: [ids from /cluster], now: unix seconds or null when finished, bestId,
 *        t0: where the time axis starts when the timeline has no t0 (the search's start)}
 */
export function renderGantt(container, timeline, trials, opts = {}) {
  const items = (timeline && timeline.items) || [];
  if (!items.length) {
    replace(container, h("div", { class: "empty" }, "No quanta recorded yet."));
    return;
  }
  const first = Math.min(...items.map((q) => q.started_at));
  const t0 = Math.min(timeline.t0 ?? opts.t0 ?? first, first);
  let tEnd = Math.max(...items.map((q) => q.ended_at));
  if (opts.now && opts.now > tEnd) tEnd = opts.now;
  const span = Math.max(1e-3, tEnd - t0);

  // Lanes: every device a quantum used, plus the cluster's devices (idle ones show as empty lanes).
  const lanes = new Set(opts.devices || []);
  for (const q of items) for (const d of devList(q.devices)) lanes.add(d);
  const laneIds = [...lanes].sort(natural);

  // Parked stretches: the gap between two consecutive quanta of a trial, on the device of the first;
  // a trial not finished yet stays parked from its last quantum until now.
  const byTrial = new Map();
  for (const q of items) {
    if (!byTrial.has(q.trial_id)) byTrial.set(q.trial_id, []);
    byTrial.get(q.trial_id).push(q);
  }
  const parked = new Map(laneIds.map((d) => [d, []]));
  for (const [tid, qs] of byTrial) {
    qs.sort((a, b) => a.started_at - b.started_at);
    for (let i = 0; i < qs.length; i++) {
      const a = qs[i].ended_at;
      let b = i + 1 < qs.length ? qs[i + 1].started_at : null;
      if (b === null) {
        const st = trials.get(tid)?.status;
        if ((st === "running" || st === "queued") && opts.now) b = tEnd;
        else continue;
      }
      if (b - a < Math.max(0.05, span * 0.004)) continue;
      const dev = devList(qs[i].devices)[0];
      if (dev && parked.has(dev)) parked.get(dev).push({ tid, a, b });
    }
  }
  const parkRows = new Map();
  for (const d of laneIds) parkRows.set(d, Math.min(MAX_PARK_ROWS, assignRows(parked.get(d))));

  const width = Math.max(360, Math.floor(container.clientWidth || 800));
  const plotW = width - LEFT - RIGHT;
  const x = (t) => LEFT + ((t - t0) / span) * plotW;
  const laneY = new Map();
  let y = TOP;
  for (const d of laneIds) {
    laneY.set(d, y);
    const rows = parkRows.get(d);
    y += RUN_H + (rows ? 2 + rows * PARK_ROW : 0) + LANE_GAP;
  }
  const height = y + AXIS_H;

  const svg = s("svg", {
    class: "gantt",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": "per-device timeline of trials",
  });
  const defs = s(
    "defs",
    {},
    s(
      "pattern",
      { id: "hatch", width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
      s("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "rgba(0,0,0,0.45)", "stroke-width": 2 }),
    ),
  );
  svg.appendChild(defs);

  // Time axis.
  const step = niceStep(span, Math.max(2, Math.floor(plotW / 90)));
  const axis = s("g", { class: "axis" });
  for (let t = 0; t <= span + 1e-9; t += step) {
    const px = x(t0 + t);
    axis.appendChild(s("line", { x1: px, x2: px, y1: TOP - 4, y2: height - AXIS_H + 2, class: "grid" }));
    axis.appendChild(
      s("text", { x: px, y: height - AXIS_H + 16, "text-anchor": "middle" }, `${fmtNum(t, 3)} s`),
    );
  }
  svg.appendChild(axis);

  // Lanes.
  const lanesG = s("g", { class: "lanes" });
  for (const d of laneIds) {
    const ly = laneY.get(d);
    lanesG.appendChild(s("rect", { x: LEFT, y: ly, width: plotW, height: RUN_H, class: "lane-bg" }));
    lanesG.appendChild(s("text", { x: LEFT - 8, y: ly + RUN_H / 2 + 4, "text-anchor": "end", class: "lane-label" }, d));
  }
  svg.appendChild(lanesG);

  // Quanta.
  const qG = s("g", { class: "quanta" });
  for (const q of items) {
    const packedWith = devList(q.packed_with);
    const packed = packedWith.length > 0;
    const x0 = x(q.started_at);
    const w = Math.max(1, x(q.ended_at) - x0);
    const tr = trials.get(q.trial_id);
    const st = tr?.status || "";
    const group = packed ? [String(q.trial_id), ...packedWith].sort(natural) : [String(q.trial_id)];
    const slot = group.indexOf(String(q.trial_id));
    const n = group.length;
    for (const d of devList(q.devices)) {
      if (!laneY.has(d)) continue;
      const ly = laneY.get(d);
      const bh = packed ? (RUN_H - 2) / n : RUN_H - 2;
      const by = ly + 1 + slot * bh;
      const cls = ["quantum", packed ? "packed" : "", q.trial_id === opts.bestId ? "best" : "", st].filter(Boolean);
      const g = s("g", { class: cls.join(" "), "data-trial-id": q.trial_id });
      g.appendChild(
        stitle(
          `trial ${q.trial_id} on ${d}: ${fmtNum(q.started_at - t0, 3)}–${fmtNum(q.ended_at - t0, 3)} s` +
            (packed ? `, packed with ${packedWith.join(", ")}` : "") +
            (st ? ` (${st})` : ""),
        ),
      );
      g.appendChild(s("rect", { x: x0, y: by, width: w, height: bh, fill: trialColor(q.trial_id, 0.85), rx: 2 }));
      if (packed) g.appendChild(s("rect", { x: x0, y: by, width: w, height: bh, fill: "url(#hatch)", class: "hatch" }));
      if (w > 26 && bh >= 11) {
        g.appendChild(
          s("text", { x: x0 + 3, y: by + bh / 2 + 4, class: "qlabel" }, String(q.trial_id)),
        );
      }
      qG.appendChild(g);
    }
  }
  svg.appendChild(qG);

  // Parked strips.
  const pG = s("g", { class: "parked" });
  for (const d of laneIds) {
    const ly = laneY.get(d) + RUN_H + 2;
    for (const p of parked.get(d)) {
      if (p.row >= MAX_PARK_ROWS) continue;
      const x0 = x(p.a);
      const g = s("g", { class: "parked-strip", "data-trial-id": p.tid });
      g.appendChild(stitle(`trial ${p.tid} parked on ${d}: ${fmtNum(p.a - t0, 3)}–${fmtNum(p.b - t0, 3)} s`));
      g.appendChild(
        s("rect", {
          x: x0,
          y: ly + p.row * PARK_ROW,
          width: Math.max(1, x(p.b) - x0),
          height: PARK_ROW - 1,
          fill: trialColor(p.tid, 0.45),
        }),
      );
      pG.appendChild(g);
    }
  }
  svg.appendChild(pG);

  const legend = h(
    "div",
    { class: "legend" },
    h("span", { class: "key key-run" }),
    "ran alone (colour = trial, label = trial id)",
    h("span", { class: "key key-packed" }),
    "packed: device shared, one half per trial",
    h("span", { class: "key key-parked" }),
    "parked between quanta",
  );
  replace(container, svg, legend);
}
