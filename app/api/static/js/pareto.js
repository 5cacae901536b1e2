// A multi-objective (or constrained) search's trade-offs, from /searches/{id}/pareto: with two objectives
// a scatter of every point (one per report step of a trial) with the Pareto front drawn as a step line and
// infeasible points greyed; with three or four, parallel coordinates of the objectives (the axes of
// parcoords.js), one line per point. A click on a point or a line opens its trial. Plain SVG; every
// string reaches the page as text.

import { s, stitle, h, replace, fmtNum } from "./dom.js";
import { makeAxis } from "./parcoords.js";

const KIND_FILL = {
  front: "#d98c00",
  dominated: "hsla(215, 70%, 45%, 0.55)",
  infeasible: "#c4c8cf",
};
const KIND_LABEL = { front: "on the front", dominated: "dominated", infeasible: "infeasible (greyed)", non_finite: "non-finite (not drawn)" };

/** "2 on the front, 5 dominated, ...": the non-empty counts of a CountsOut. */
export function countsLine(c, noun) {
  if (!c) return "";
  const parts = ["front", "dominated", "infeasible", "non_finite", "no_points"]
    .filter((k) => c[k])
    .map((k) => `${c[k]} ${k === "front" ? "on the front" : k === "non_finite" ? "non-finite" : k === "no_points" ? "without a point yet" : k}`);
  return parts.length ? `${noun}: ${parts.join(", ")}` : "";
}

function pointTitle(p, objectives) {
  const vals = objectives.map((o, i) => `${o.name} ${p.values[i] === null ? "non-finite" : fmtNum(p.values[i])}`).join(", ");
  const v = p.kind === "infeasible" ? `; violation ${p.violation === null ? "unknown" : fmtNum(p.violation, 3)}` : "";
  return `trial ${p.trial_id}, step ${p.step} (${KIND_LABEL[p.kind] || p.kind}): ${vals}${v}`;
}

/** A linear scale from [lo, hi] to pixels [a, b], a twentieth wider on each side so that no point sits on an axis. */
function linear(lo, hi, a, b) {
  if (lo === hi) {
    const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const m = (hi - lo) / 20;
  return { map: (v) => a + ((v - lo + m) / (hi - lo + 2 * m)) * (b - a), ticks: [lo, (lo + hi) / 2, hi] };
}

function legend(data) {
  const drawn = ["front", "dominated", "infeasible"].filter((k) => data.counts?.[k]);
  return h(
    "div",
    { class: "legend" },
    ...drawn.flatMap((k) => [h("span", { class: `key key-${k}`, style: `background:${KIND_FILL[k]}` }), KIND_LABEL[k]]),
    data.counts?.non_finite ? ` · ${data.counts.non_finite} non-finite point(s) not drawn` : "",
    data.points_total > (data.points || []).length ? ` · ${(data.points || []).length} of ${data.points_total} points shown` : "",
  );
}

/** data: ParetoOut; `onPick(trialId)` when a point is clicked. Two objectives: a scatter, more: lines. */
export function renderPareto(container, data, onPick) {
  const objectives = data?.objectives || [];
  const drawable = (data?.points || []).filter((p) => p.values.every((v) => typeof v === "number"));
  if (!drawable.length) {
    replace(container, h("div", { class: "empty" }, data?.note || "No point to draw yet."));
    return;
  }
  if (objectives.length === 2) renderScatter(container, data, drawable, onPick);
  else if (objectives.length > 2) renderLines(container, data, drawable, onPick);
  else {
    // One objective under constraints: its front is its best feasible point.
    const best = (data.front || [])[0];
    replace(
      container,
      h("div", { class: "hint", id: "pareto-best" }, best ? h("span", {}, "best feasible point: ", h("a", { href: `#/trial/${Number(best.trial_id)}` }, `trial ${best.trial_id}`), ` at step ${best.step}, ${objectives[0].name} ${fmtNum(best.values[objectives[0].name])}`) : "no feasible point yet"),
    );
  }
}

function renderScatter(container, data, pts, onPick) {
  const [ox, oy] = data.objectives;
  const width = Math.max(360, Math.floor(container.clientWidth || 640));
  const height = 320;
  const L = 60;
  const R = 16;
  const T = 14;
  const B = 40;
  const xs = pts.map((p) => p.values[0]);
  const ys = pts.map((p) => p.values[1]);
  const x = linear(Math.min(...xs), Math.max(...xs), L, width - R);
  const y = linear(Math.min(...ys), Math.max(...ys), height - B, T);
  const svg = s("svg", { class: "pareto-scatter", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-x": ox.name, "data-y": oy.name });
  svg.appendChild(s("line", { x1: L, x2: width - R, y1: height - B, y2: height - B, class: "axis" }));
  svg.appendChild(s("line", { x1: L, x2: L, y1: T, y2: height - B, class: "axis" }));
  for (const v of x.ticks) svg.appendChild(s("text", { x: x.map(v), y: height - B + 14, "text-anchor": "middle", class: "tick" }, fmtNum(v, 3)));
  for (const v of y.ticks) svg.appendChild(s("text", { x: L - 4, y: y.map(v) + 3, "text-anchor": "end", class: "tick" }, fmtNum(v, 3)));
  svg.appendChild(s("text", { x: (L + width - R) / 2, y: height - 6, "text-anchor": "middle", class: "aname" }, `${ox.name} (${ox.goal === "minimize" ? "lower" : "higher"} is better)`));
  svg.appendChild(s("text", { x: 12, y: (T + height - B) / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${(T + height - B) / 2})`, class: "aname" }, `${oy.name} (${oy.goal === "minimize" ? "lower" : "higher"} is better)`));

  // The front as a step line: from each front point level in the second objective up to the next one's
  // first objective, then to it (the edge of what the front dominates). The API sends the front best in
  // the first objective first.
  const front = (data.front || []).map((p) => [p.values[ox.name], p.values[oy.name]]);
  if (front.length) {
    let d = `M${x.map(front[0][0]).toFixed(1)},${y.map(front[0][1]).toFixed(1)}`;
    for (let i = 1; i < front.length; i++) {
      d += ` L${x.map(front[i][0]).toFixed(1)},${y.map(front[i - 1][1]).toFixed(1)} L${x.map(front[i][0]).toFixed(1)},${y.map(front[i][1]).toFixed(1)}`;
    }
    svg.appendChild(s("path", { d, class: "front-line", fill: "none", stroke: KIND_FILL.front, "stroke-width": 2 }));
  }
  // Greyed and dominated points first, the front on top.
  const rank = { infeasible: 0, dominated: 1, front: 2 };
  for (const p of [...pts].sort((a, b) => (rank[a.kind] ?? 0) - (rank[b.kind] ?? 0))) {
    const c = s("circle", {
      cx: x.map(p.values[0]).toFixed(1),
      cy: y.map(p.values[1]).toFixed(1),
      r: p.kind === "front" ? 5 : 3.5,
      class: `pt kind-${p.kind}`,
      fill: KIND_FILL[p.kind],
      "data-trial-id": p.trial_id,
      "data-kind": p.kind,
    });
    c.appendChild(stitle(pointTitle(p, data.objectives)));
    if (onPick) c.addEventListener("click", () => onPick(p.trial_id));
    svg.appendChild(c);
  }
  replace(container, svg, legend(data));
}

function renderLines(container, data, pts, onPick) {
  const objectives = data.objectives;
  const axes = objectives.map((o, i) => makeAxis(o.name, pts.map((p) => p.values[i])));
  const width = Math.max(420, Math.floor(container.clientWidth || 800));
  const height = 300;
  const TOP = 34;
  const BOTTOM = 20;
  const LEFT = 50;
  const RIGHT = 60;
  const plotH = height - TOP - BOTTOM;
  const gap = (width - LEFT - RIGHT) / Math.max(1, axes.length - 1);
  const ax = (i) => LEFT + i * gap;
  const ypos = (a, v) => TOP + (1 - (a.pos(v) ?? 0)) * plotH;
  const svg = s("svg", { class: "parcoords pareto-lines", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const linesG = s("g", { class: "lines" });
  const rank = { infeasible: 0, dominated: 1, front: 2 };
  for (const p of [...pts].sort((a, b) => (rank[a.kind] ?? 0) - (rank[b.kind] ?? 0))) {
    const d = axes.map((a, j) => `${j ? "L" : "M"}${ax(j).toFixed(1)},${ypos(a, p.values[j]).toFixed(1)}`).join(" ");
    const path = s("path", { d, class: `pline kind-${p.kind}${p.kind === "front" ? " best" : ""}`, stroke: KIND_FILL[p.kind], fill: "none", "data-trial-id": p.trial_id, "data-kind": p.kind });
    path.appendChild(stitle(pointTitle(p, objectives)));
    if (onPick) path.addEventListener("click", () => onPick(p.trial_id));
    linesG.appendChild(path);
  }
  const axesG = s("g", { class: "axes" });
  axes.forEach((a, j) => {
    const o = objectives[j];
    const g = s("g", { class: "paxis", "data-param": a.name, "data-kind": a.kind });
    g.appendChild(s("line", { x1: ax(j), x2: ax(j), y1: TOP, y2: TOP + plotH }));
    g.appendChild(s("g", { class: "alabel" }, stitle(`${o.name} (${o.goal})`), s("text", { x: ax(j), y: TOP - 14, "text-anchor": j === 0 ? "start" : j === axes.length - 1 ? "end" : "middle", class: "aname" }, `${o.name} ${o.goal === "minimize" ? "↓" : "↑"}`)));
    for (const tv of a.ticks) {
      const v = typeof tv === "object" ? tv.value : tv;
      g.appendChild(s("text", { x: ax(j) + 5, y: ypos(a, v) + 3, class: "tick" }, typeof tv === "object" ? tv.label : fmtNum(tv, 3)));
    }
    axesG.appendChild(g);
  });
  svg.appendChild(linesG);
  svg.appendChild(axesG);
  replace(container, svg, legend(data));
}
