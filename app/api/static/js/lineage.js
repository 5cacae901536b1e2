// A search's population as a tree over steps, from /searches/{id}/lineage: one row per trial, its line
// running over the steps it computed, from where it started (0, or its fork step) to where it is. A fork
// is an edge from its parent's row at the fork step to the start of its line; a population's exploit (the
// trial took another's state) is an edge from the source's row at that step to a new stretch of the
// trial's line, which starts there; a change of values while it ran is a tick on its line. Every mark
// says what it is in its title (the values, the source). A click on a row opens its trial. Also the
// trial page's change points (`changeMarks`). Plain SVG; every string reaches the page as text.

import { s, stitle, h, replace, fmtNum, trialColor } from "./dom.js";

/** "lr 0.001, momentum 0.9": a change's values. */
export function valuesText(values) {
  return Object.entries(values || {})
    .map(([k, v]) => `${k} ${typeof v === "number" ? fmtNum(v, 4) : JSON.stringify(v)}`)
    .join(", ");
}

/** What a change is, for a person: "step 20: exploit of trial 3: lr 0.012". */
export function changeText(c) {
  const why = c.cause === "exploit" ? `exploit of trial ${c.source_id}` : c.cause === "fork" ? `fork of trial ${c.source_id}` : "set";
  return `step ${c.step}: ${why}: ${valuesText(c.values) || "same values"}`;
}

/** Whether a lineage has anything to draw beyond a plain list of trials. */
export function hasLineage(data) {
  return Boolean(data && ((data.mutable || []).length || (data.trials || []).some((t) => t.parent_id !== null || (t.changes || []).length)));
}

/**
 * The stretches of a trial's line: [[from, to, cause, source], ...]. The first starts at its fork step
 * (0 for a root); each exploit starts a new one at its step, from its source.
 */
export function stretches(t) {
  const out = [];
  let from = t.fork_step ?? 0;
  let cause = t.parent_id !== null && t.parent_id !== undefined ? "fork" : "root";
  let source = t.parent_id ?? null;
  for (const c of t.changes || []) {
    if (c.cause !== "exploit") continue;
    out.push([from, Math.max(from, c.step), cause, source]);
    from = c.step;
    cause = "exploit";
    source = c.source_id;
  }
  out.push([from, Math.max(from, t.steps ?? from), cause, source]);
  return out;
}

/** data: LineageOut; `onPick(trialId)` when a row is clicked. */
export function renderLineage(container, data, onPick) {
  const trials = data?.trials || [];
  if (!trials.length) {
    replace(container, h("div", { class: "empty" }, "No trial yet."));
    return;
  }
  const width = Math.max(360, Math.floor(container.clientWidth || 640));
  const rowH = 22;
  const L = 70;
  const R = 16;
  const T = 10;
  const B = 34;
  const height = T + B + rowH * trials.length;
  const maxStep = Math.max(1, ...trials.map((t) => t.steps ?? 0), ...trials.flatMap((t) => (t.changes || []).map((c) => c.step)));
  const x = (step) => L + (Math.max(0, step) / maxStep) * (width - L - R);
  const row = new Map(trials.map((t, i) => [t.id, i]));
  const y = (id) => T + rowH * (row.get(id) ?? 0) + rowH / 2;

  const svg = s("svg", { class: "lineage-tree", width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "data-max-step": maxStep });
  svg.appendChild(s("line", { x1: L, x2: width - R, y1: height - B, y2: height - B, class: "axis" }));
  for (const v of [0, Math.round(maxStep / 2), maxStep]) {
    svg.appendChild(s("text", { x: x(v), y: height - B + 14, "text-anchor": "middle", class: "tick" }, String(v)));
  }
  svg.appendChild(s("text", { x: (L + width - R) / 2, y: height - 6, "text-anchor": "middle", class: "aname" }, "step"));

  // Edges first (under the lines): from the parent's or source's row at the step to the new stretch.
  const edges = s("g", { class: "edges" });
  for (const t of trials) {
    for (const [from, , cause, source] of stretches(t)) {
      if (cause === "root" || source === null || !row.has(source)) continue;
      const e = s("path", {
        d: `M${x(from).toFixed(1)},${y(source).toFixed(1)} C${(x(from) + 14).toFixed(1)},${y(source).toFixed(1)} ${(x(from) - 14).toFixed(1)},${y(t.id).toFixed(1)} ${x(from).toFixed(1)},${y(t.id).toFixed(1)}`,
        class: `edge edge-${cause}`,
        fill: "none",
        "data-from": source,
        "data-to": t.id,
        "data-step": from,
        "data-cause": cause,
      });
      e.appendChild(stitle(`trial ${t.id} took trial ${source}'s state at step ${from} (${cause})`));
      edges.appendChild(e);
    }
  }
  svg.appendChild(edges);

  for (const t of trials) {
    const g = s("g", { class: `lineage-trial st-${String(t.status).replace(/[^a-z]/g, "")}`, "data-trial-id": t.id });
    // The whole row takes the click (a line is too thin to aim at).
    g.appendChild(s("rect", { x: 0, y: y(t.id) - rowH / 2, width, height: rowH, class: "hit", fill: "transparent" }));
    const label = s("text", { x: L - 6, y: y(t.id) + 4, "text-anchor": "end", class: "rowname" }, `trial ${t.id}`);
    label.appendChild(stitle(`trial ${t.id} (#${t.number}), ${t.status}, ${t.steps} steps${t.metric !== null ? `, metric ${fmtNum(t.metric)}` : ""}`));
    g.appendChild(label);
    for (const [from, to, cause] of stretches(t)) {
      const seg = s("line", {
        x1: x(from).toFixed(1),
        x2: Math.max(x(to), x(from) + 2).toFixed(1),
        y1: y(t.id),
        y2: y(t.id),
        class: `seg seg-${cause}`,
        stroke: trialColor(t.id),
        "stroke-width": 4,
        "data-from": from,
        "data-to": to,
      });
      seg.appendChild(stitle(`trial ${t.id}: steps ${from} to ${to}`));
      g.appendChild(seg);
    }
    for (const c of t.changes || []) {
      const m = s("circle", { cx: x(c.step).toFixed(1), cy: y(t.id), r: c.cause === "set" ? 3.5 : 5, class: `change change-${c.cause}`, "data-step": c.step, "data-cause": c.cause });
      m.appendChild(stitle(`trial ${t.id}, ${changeText(c)}`));
      g.appendChild(m);
    }
    if (onPick) g.addEventListener("click", () => onPick(t.id));
    svg.appendChild(g);
  }
  replace(
    container,
    h(
      "div",
      { class: "legend" },
      h("span", { class: "key key-fork" }),
      "fork",
      h("span", { class: "key key-exploit" }),
      "exploit (took another trial's state)",
      h("span", { class: "key key-set" }),
      "values set while it ran",
      (data.mutable || []).length ? ` · mutable: ${data.mutable.join(", ")}` : "",
    ),
    svg,
  );
}

/**
 * A trial's config changes as marks over its learning curve: one per change, placed at its step by
 * `xPos(step)` (pixels in `over`, the chart's overlay), labelled with its values. Replaces earlier marks.
 */
export function changeMarks(over, changes, xPos) {
  for (const old of over.querySelectorAll(".change-mark")) old.remove();
  for (const c of changes || []) {
    const left = xPos(c.step);
    if (!Number.isFinite(left)) continue;
    const mark = h(
      "div",
      { class: `change-mark change-${c.cause}`, style: `left:${left.toFixed(1)}px`, title: changeText(c), "data-step": c.step, "data-cause": c.cause },
      h("span", { class: "change-label" }, valuesText(c.values) || c.cause),
    );
    over.appendChild(mark);
  }
}
