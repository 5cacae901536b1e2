// What the dashboard's views share: status badges, progress bars, panels, error display and the
// refresher that coalesces live updates. A view is {onEvent(kind, data), poll(), dispose()}.

import { AuthError } from "./api.js";
import { h, replace } from "./dom.js";

/** Searches in these states still change: their pages follow them live. */
export const ACTIVE = new Set(["queued", "running", "paused"]);
/** Trials in these states still change. */
export const TRIAL_ACTIVE = new Set(["queued", "running"]);

let onAuthError = () => {};

/** The page's answer to a refused token (app.js: back to the token form). */
export function setAuthHandler(fn) {
  onAuthError = fn;
}

export function refused() {
  onAuthError("The stored token was refused; enter a valid one.");
}

export function statusBadge(status) {
  return h("span", { class: `badge st-${String(status).replace(/[^a-z]/g, "")}` }, status);
}

export function goalArrow(metric) {
  if (!metric) return "";
  return metric.goal === "minimize" ? "↓" : "↑";
}

/** The buckets a search's trials stand in (`progress.trials`, quanta.status.TrialCounts), in lifecycle order. */
export const TRIAL_BUCKETS = ["queued", "running", "parked", "completed", "stopped", "killed", "failed"];

/** "2 running, 3 parked, 1 failed": the non-empty buckets of `progress.trials` ("" when not stored). */
export function countsText(p) {
  const c = p?.trials;
  if (!c) return "";
  return TRIAL_BUCKETS.filter((b) => c[b]).map((b) => `${c[b]} ${b}`).join(", ") || "none";
}

/** Trials evaluated: ended, or judged at a rung (a successive-halving search parks most of its trials at
 * a rung until it ends, so counting ended ones only kept its bar at 0 for most of its run). */
export function evaluated(p) {
  return p?.trials?.evaluated ?? p?.trials_done ?? 0;
}

export function progressBar(p) {
  const max = p?.max_trials || 0;
  const done = evaluated(p);
  const created = p?.trials_created || 0;
  const pct = max ? Math.min(100, (100 * done) / max) : 0;
  const pctCreated = max ? Math.min(100, (100 * created) / max) : 0;
  const counts = countsText(p);
  return h(
    "div",
    { class: "progress", title: `${done} evaluated (ended or judged at a rung), ${created} created of at most ${max} trials${counts ? `: ${counts}` : ""}` },
    h("div", { class: "bar" }, h("div", { class: "created", style: `width:${pctCreated.toFixed(1)}%` }), h("div", { class: "done", style: `width:${pct.toFixed(1)}%` })),
    h("span", { class: "ptext" }, `${done}/${max}`),
  );
}

/** A titled panel; `attrs` go on the section (an id, `hidden`). */
export function panel(titleText, hint, attrs, ...content) {
  return h(
    "section",
    { class: "panel", ...(attrs || {}) },
    h("div", { class: "panel-head" }, h("h3", {}, titleText), hint ? h("span", { class: "muted" }, hint) : ""),
    ...content,
  );
}

/** A stat tile: label, value, and whatever goes below. */
export function stat(label, ...value) {
  return h("div", { class: "stat" }, h("div", { class: "label" }, label), h("div", { class: "value" }, ...value));
}

export function showError(container, err) {
  if (err instanceof AuthError) return refused();
  replace(container, h("div", { class: "error" }, String(err.message || err)));
}

export function onRefreshError(part) {
  return (e) => {
    if (e instanceof AuthError) refused();
    else console.warn(`refresh ${part}:`, e.message || e);
  };
}

/** Coalesce refreshes: parts marked dirty are refreshed together at most every `ms`. */
export function refresher(parts, ms = 700) {
  const dirty = new Set();
  let timer = null;
  let running = false;
  let disposed = false;
  const flush = async () => {
    timer = null;
    if (disposed) return;
    if (running) {
      timer = setTimeout(flush, ms);
      return;
    }
    running = true;
    const todo = [...dirty];
    dirty.clear();
    try {
      await Promise.all(todo.map((p) => parts[p]().catch(onRefreshError(p))));
    } finally {
      running = false;
    }
  };
  return {
    mark(...names) {
      for (const n of names) if (parts[n]) dirty.add(n);
      if (!timer) timer = setTimeout(flush, ms);
    },
    now: async (...names) => {
      await Promise.all(names.map((n) => parts[n]().catch(onRefreshError(n))));
    },
    dispose() {
      disposed = true;
      clearTimeout(timer);
    },
  };
}
