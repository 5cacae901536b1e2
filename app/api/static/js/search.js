// A search's page (#/search/<id>): summary and controls (pause, stop, resume or extend with more trials or
// time), its tags and notes (editable), best-so-far and learning curves, for a search with several
// objectives or constraints its trade-offs (every point with the Pareto front, the hypervolume over time:
// pareto.js), for a search with mutable parameters or forks its population as a tree over steps (forks
// and exploits as edges from the trial whose state was taken: lineage.js), the device timeline, parameters versus metric (parallel coordinates, importance, contour,
// slices), the trial table, the cluster now (while the search is active) and its spec. Followed live
// through /events.

import { api } from "./api.js";
import { h, replace, clear, fmtNum, fmtDuration, fmtTime, paramsText, debounce } from "./dom.js";
import { BestChart, CurvesChart } from "./charts.js";
import { renderGantt } from "./gantt.js";
import { renderParcoords } from "./parcoords.js";
import { renderImportance, renderSlices, renderContour } from "./landscape.js";
import { countsLine, renderPareto } from "./pareto.js";
import { hasLineage, renderLineage } from "./lineage.js";
import { TrialTable } from "./trialtable.js";
import { tagChips } from "./list.js";
import { ACTIVE, countsText, evaluated, goalArrow, panel, progressBar, refresher, showError, stat, statusBadge } from "./views.js";

/** Tags as typed: separated by spaces or commas, each once, in order. */
export function parseTags(text) {
  return [...new Set(String(text || "").split(/[\s,]+/).filter(Boolean))];
}

/** The API's complaint about a request, for a person: a 422's fields and reasons, else its message. */
export function complaint(e) {
  const text = String(e.message || e).replace(/^[A-Z]+ \S+: \d+ /, "");
  try {
    const detail = JSON.parse(text);
    if (Array.isArray(detail)) {
      return detail.map((d) => `${(Array.isArray(d.loc) ? d.loc : [d.loc]).filter((x) => x !== "body").join(".")}: ${d.msg}`).join("; ");
    }
  } catch {}
  return text;
}

/** me: the signed-in user ({name, role}) or null; a viewer gets no controls. */
export function searchView(root, id, me = null) {
  const writer = !me || me.role !== "viewer";
  const st = { search: null, trials: new Map(), allTrials: [], timeline: null, cluster: null, disposed: false, importance: null, contour: { x: null, y: null } };

  const title = h("h2", { class: "search-name", id: "search-name" });
  const badge = h("span");
  const actions = h("div", { class: "actions" });
  // Its tags and notes, and their editor (kept across refreshes: a refresh redraws only what is shown).
  const infoEl = h("div", { class: "search-info", id: "search-info" });
  const tagsInput = h("input", { type: "text", id: "tags-input", placeholder: "tags, separated by spaces", maxlength: 900 });
  const notesInput = h("textarea", { id: "notes-input", rows: 3, maxlength: 4000, placeholder: "notes" });
  const infoError = h("div", { class: "error", id: "info-error", hidden: true });
  const editor = h(
    "form",
    { class: "info-editor", id: "info-editor", hidden: true },
    h("label", { for: "tags-input" }, "Tags"),
    tagsInput,
    h("label", { for: "notes-input" }, "Notes"),
    notesInput,
    h("div", { class: "actions" }, h("button", { type: "submit", id: "info-save" }, "Save"), h("button", { type: "button", id: "info-cancel" }, "Cancel")),
    infoError,
  );
  // Resume a stopped or completed search, or extend one, with more trials or time.
  const moreTrials = h("input", { type: "number", id: "more-trials", min: 0, step: 1, value: 0 });
  const moreSeconds = h("input", { type: "number", id: "more-seconds", min: 0, step: 60, value: 0 });
  const moreForm = h(
    "form",
    { class: "more-form", id: "more-form", hidden: true },
    h("label", { for: "more-trials" }, "more trials "),
    moreTrials,
    h("label", { for: "more-seconds" }, " more seconds "),
    moreSeconds,
    h("button", { type: "submit", id: "more-go" }, "Go on"),
  );
  const stats = h("div", { class: "stats" });
  const errorBox = h("div", { class: "error", id: "search-error", hidden: true });
  const warningBox = h("div", { class: "warning", id: "search-warning", hidden: true });
  const bestEl = h("div", { class: "chart", id: "chart-best" });
  const curvesEl = h("div", { class: "chart", id: "chart-curves" });
  const curvesInfo = h("div", { class: "hint" }, "Hover a curve to see its trial.");
  const ganttEl = h("div", { class: "gantt-wrap", id: "gantt" });
  const pcEl = h("div", { class: "pc-wrap", id: "parcoords" });
  // Trade-offs: shown for a search with several objectives or constraints only (`tradeOffs`).
  const paretoEl = h("div", { class: "pareto-wrap", id: "pareto" });
  const paretoInfo = h("div", { class: "hint", id: "pareto-info" });
  const hvEl = h("div", { class: "chart", id: "chart-hv" });
  const paretoPanel = panel("Trade-offs", "every reported point; the front as a line, infeasible points grey (click one to open its trial)", { id: "pareto-panel", hidden: true }, paretoInfo, paretoEl);
  const hvPanel = panel("Hypervolume over time", "what the feasible front dominates, up to the reference point", { id: "hv-panel", hidden: true }, hvEl);
  // The population over steps: shown for a search with mutable parameters or forks only (`hasLineage`).
  const lineageEl = h("div", { class: "lineage-wrap", id: "lineage" });
  const lineagePanel = panel("Population", "each trial over the steps it ran; an edge where it took another trial's state (fork, exploit); click a row to open its trial", { id: "lineage-panel", hidden: true }, lineageEl);
  const table = new TrialTable();
  const clusterEl = h("div", { class: "cluster", id: "cluster" });
  // "Cluster now" says what runs where at this moment: shown while the search is active only.
  const clusterPanel = panel("Cluster", "now", { id: "cluster-panel", hidden: true }, clusterEl);
  const specEl = h("pre", { class: "spec" });
  const impEl = h("div", { class: "imp-wrap", id: "importance" });
  const slicesEl = h("div", { class: "slices-wrap", id: "slices" });
  const contourEl = h("div", { class: "contour-wrap", id: "contour" });
  const pickAxis = (which) => (ev) => {
    st.contour[which] = ev.target.value;
    r.now("contour");
  };
  const cxSel = h("select", { id: "contour-x", onchange: pickAxis("x") });
  // Several objectives: importance is of one of them at a time (the first by default).
  const impSel = h("select", { id: "importance-objective", onchange: (ev) => {
    st.importanceObjective = ev.target.value;
    r.now("importance");
  } });
  const impPick = h("div", { class: "contour-pick", id: "importance-pick", hidden: true }, "objective ", impSel);
  const cySel = h("select", { id: "contour-y", onchange: pickAxis("y") });

  replace(
    root,
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "← all searches")),
    h("div", { class: "search-head" }, h("div", { class: "title-row" }, title, badge), actions),
    moreForm,
    infoEl,
    editor,
    errorBox,
    warningBox,
    stats,
    h(
      "div",
      { class: "grid" },
      panel("Best so far", "best metric versus time since start", null, bestEl),
      panel(
        "Learning curves",
        "",
        null,
        h("div", { class: "legend" }, h("span", { class: "key key-best" }), "best", h("span", { class: "key key-killed" }), "killed", h("span", { class: "key key-failed" }), "failed", h("span", { class: "key key-run" }), "other trials"),
        curvesEl,
        curvesInfo,
      ),
    ),
    h("div", { class: "grid" }, paretoPanel, hvPanel),
    lineagePanel,
    panel("Device timeline", "each quantum: which trial ran on which device (click one to open its trial)", null, ganttEl),
    panel("Params versus metric", "parallel coordinates, one line per trial", null, pcEl),
    h(
      "div",
      { class: "grid" },
      panel("Parameter importance", "how much the metric depends on each parameter", null, impPick, impEl),
      panel("Contour", "the metric over two parameters", null, h("div", { class: "contour-pick" }, "x ", cxSel, " y ", cySel), contourEl),
    ),
    panel("Slices", "each parameter against the metric, one dot per trial", null, slicesEl),
    panel("Trials", "click a column to sort, an id to open the trial", { id: "trials-panel" }, table.el),
    h("div", { class: "grid" }, clusterPanel, panel("Spec", "", null, h("details", {}, h("summary", {}, "show the posted spec"), specEl))),
  );

  const bestChart = new BestChart(bestEl);
  const curvesChart = new CurvesChart(curvesEl, curvesInfo);
  const hvChart = new BestChart(hvEl);

  const bestId = () => st.search?.best?.trial_id ?? null;
  const active = () => !st.search || ACTIVE.has(st.search.status);
  const nowOrEnd = () => {
    const sr = st.search;
    if (!sr) return null;
    if (sr.finished_at) return sr.finished_at;
    return ACTIVE.has(sr.status) ? Date.now() / 1000 : null;
  };

  ganttEl.addEventListener("click", (ev) => {
    const q = ev.target.closest("[data-trial-id]");
    if (q) window.location.hash = `#/trial/${Number(q.dataset.trialId)}`;
  });

  function editing() {
    return !editor.hidden;
  }

  function drawInfo(sr) {
    const edit = writer ? h("button", { type: "button", class: "link-button", id: "info-edit" }, sr.tags?.length || sr.notes ? "edit tags and notes" : "add tags or notes") : "";
    if (edit) {
      edit.addEventListener("click", () => {
        tagsInput.value = (sr.tags || []).join(" ");
        notesInput.value = sr.notes || "";
        infoError.hidden = true;
        editor.hidden = false;
        infoEl.hidden = true;
        tagsInput.focus();
      });
    }
    replace(
      infoEl,
      h("span", { class: "tags", id: "search-tags" }, ...tagChips(sr.tags)),
      sr.notes ? h("p", { class: "notes", id: "search-notes" }, sr.notes) : "",
      edit,
    );
  }

  editor.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const sr = await api(`/searches/${id}`, { method: "PATCH", body: { tags: parseTags(tagsInput.value), notes: notesInput.value } });
      editor.hidden = true;
      infoEl.hidden = false;
      st.search = { ...st.search, tags: sr.tags, notes: sr.notes };
      drawInfo(st.search);
    } catch (e) {
      infoError.hidden = false;
      infoError.textContent = complaint(e);
    }
  });
  editor.querySelector("#info-cancel").addEventListener("click", () => {
    editor.hidden = true;
    infoEl.hidden = false;
  });

  moreForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { max_trials: Math.max(0, Math.floor(Number(moreTrials.value) || 0)), max_seconds: Math.max(0, Number(moreSeconds.value) || 0) };
    try {
      await api(`/searches/${id}/resume`, { method: "POST", body });
      moreForm.hidden = true;
      errorBox.hidden = true;
    } catch (e) {
      alertBox(complaint(e));
    }
    r.mark("summary", "trials", "cluster");
  });

  // ------------ parts
  async function summary() {
    const sr = await api(`/searches/${id}`);
    st.search = sr;
    title.textContent = sr.name;
    document.title = `${sr.name} · Quanta`;
    replace(
      badge,
      statusBadge(sr.status),
      sr.reached ? h("span", { class: "reached" }, " target reached ✓") : "",
      h("span", { class: "muted", id: "search-owner" }, ` · ${sr.owner || ""}`),
      sr.waiting ? h("span", { class: "waiting muted", id: "search-waiting" }, ` · ${sr.waiting}`) : "",
    );
    const btn = (label, cmd, cls = "") =>
      h("button", {
        class: cls,
        "data-action": cmd,
        onclick: async (ev) => {
          if (cmd === "stop" && !confirm(`Stop search ${sr.id}? Its running trials are stopped.`)) return;
          ev.target.disabled = true;
          try {
            await api(`/searches/${id}/${cmd}`, { method: "POST" });
          } catch (e) {
            alertBox(e);
          }
          r.mark("summary", "trials", "cluster");
        },
      }, label);
    clear(actions);
    if (writer) {
      if (sr.status === "running" || sr.status === "queued") actions.appendChild(btn("Pause", "pause"));
      if (sr.status === "paused") actions.appendChild(btn("Resume", "resume"));
      // An ended search goes on (a stopped one as it is, any with more trials or time); a running one
      // may be given more.
      const more = sr.status === "stopped" || sr.status === "completed" ? "Resume…" : sr.status === "running" || sr.status === "paused" ? "Extend…" : null;
      if (more) {
        actions.appendChild(
          h("button", { type: "button", "data-action": "more", onclick: () => {
            moreForm.hidden = !moreForm.hidden;
          } }, more),
        );
      }
      if (ACTIVE.has(sr.status)) actions.appendChild(btn("Stop", "stop", "danger"));
    }
    if (!editing()) drawInfo(sr);
    clusterPanel.hidden = !ACTIVE.has(sr.status);

    const m = sr.metric || {};
    const p = sr.progress || {};
    const end = nowOrEnd();
    replace(
      stats,
      stat(`best ${m.name || "metric"} ${goalArrow(m)}`, sr.best ? fmtNum(sr.best.metric) : "—", sr.best ? h("div", { class: "sub" }, h("a", { href: `#/trial/${Number(sr.best.trial_id)}` }, `trial ${sr.best.trial_id}`), `: ${paramsText(sr.best.params)}`) : ""),
      stat("target", m.target !== null && m.target !== undefined ? fmtNum(m.target) : "none", h("div", { class: "sub" }, sr.reached ? `reached after ${fmtDuration(sr.seconds_to_target)}` : "not reached")),
      stat("trials", `${evaluated(p)} evaluated`, h("div", { class: "sub", id: "trial-counts" }, countsText(p) || `${p.trials_done ?? 0} done`), h("div", { class: "sub" }, `${p.trials_created ?? 0} created, at most ${p.max_trials ?? "?"}`), progressBar(p)),
      stat("elapsed", end ? fmtDuration(end - (sr.started_at ?? sr.created_at)) : "—", h("div", { class: "sub" }, `created ${fmtTime(sr.created_at)}`)),
      stat("policy", typeof sr.policy === "string" ? sr.policy : (sr.spec?.scheduler?.policy ?? "—"), h("div", { class: "sub" }, sr.spec?.trainable || "")),
    );
    specEl.textContent = JSON.stringify(sr.spec ?? {}, null, 2);
    if (sr.error) {
      errorBox.hidden = false;
      errorBox.textContent = `search error: ${sr.error}`;
    }
    warningBox.hidden = !sr.warning;
    warningBox.textContent = sr.warning ? `warning: ${sr.warning}` : "";
  }

  function alertBox(e) {
    errorBox.hidden = false;
    errorBox.textContent = String(e.message || e);
  }

  async function best() {
    const data = await api(`/searches/${id}/best`);
    if (!st.search) await summary();
    const sr = st.search;
    // The API counts best-so-far time from started_at (created_at while a search has not started).
    const until = nowOrEnd() ? nowOrEnd() - (sr.started_at ?? sr.created_at) : null;
    bestChart.update(data.points || [], sr.metric, until);
  }

  async function curves() {
    const data = await api(`/searches/${id}/curves`);
    if (!st.search) await summary();
    const labels = {};
    for (const [tid, t] of st.trials) labels[tid] = paramsText(t.params);
    curvesChart.update(data, bestId(), st.search.metric, labels);
  }

  async function allTrials() {
    // Every trial (for the table, the parallel coordinates and the timeline's statuses), paged through.
    const out = [];
    let total = Infinity;
    while (out.length < total && out.length < 5000) {
      const page = await api(`/searches/${id}/trials?offset=${out.length}&limit=500&sort=id`);
      total = page.total ?? 0;
      if (!page.items || !page.items.length) break;
      out.push(...page.items);
    }
    st.allTrials = out;
    st.trialsTotal = total;
    st.trials = new Map(out.map((t) => [t.id, t]));
    if (!st.search) await summary();
    drawFromTrials();
  }

  /** What is drawn from every trial: the table, the parallel coordinates, the slices. */
  function drawFromTrials() {
    drawTable();
    drawParcoords();
    drawSlices();
  }

  /**
   * A trial event carries the trial as the API lists it: take it as it is, without a refetch. True
   * when the event is news to the charts drawn from every trial (a new trial, or a new status).
   */
  function takeTrial(t) {
    if (!t || typeof t.id !== "number" || Number(t.search_id) !== id) return false;
    const before = st.trials.get(t.id);
    st.trials.set(t.id, t);
    st.allTrials = before ? st.allTrials.map((x) => (x.id === t.id ? t : x)) : [...st.allTrials, t].sort((a, b) => a.id - b.id);
    return !before || before.status !== t.status;
  }

  function drawTable() {
    if (!st.search) return;
    table.update(st.allTrials, { metric: st.search.metric || {}, bestId: bestId(), total: st.trialsTotal });
  }

  function drawSlices() {
    if (!st.search) return;
    const order = (st.importance?.params || []).map((p) => p.name);
    renderSlices(slicesEl, st.allTrials, st.search.metric, st.search.spec?.space, order);
  }

  async function importance() {
    const picked = st.importanceObjective;
    const data = await api(`/searches/${id}/importance${picked ? `?objective=${encodeURIComponent(picked)}` : ""}`);
    if (!st.search) await summary();
    if (picked !== st.importanceObjective) return; // another objective was picked meanwhile: its answer draws
    st.importance = data;
    const objectives = data.objectives || [];
    impPick.hidden = objectives.length < 2;
    if (objectives.length > 1 && impSel.options.length !== objectives.length) {
      replace(impSel, ...objectives.map((n) => h("option", { value: n }, n)));
    }
    if (data.metric) impSel.value = data.metric;
    renderImportance(impEl, data, (name) => {
      // A click on a bar puts that parameter on the contour's x axis (the best other one on y).
      st.contour.x = name;
      if (st.contour.y === name) st.contour.y = (data.params || []).map((p) => p.name).find((n) => n !== name) || null;
      fillContourChoices();
      r.now("contour");
    });
    fillContourChoices();
    drawSlices();
  }

  function fillContourChoices() {
    const names = (st.importance?.params || []).map((p) => p.name);
    if (!st.contour.x || !names.includes(st.contour.x)) st.contour.x = names[0] || null;
    if (!st.contour.y || !names.includes(st.contour.y) || st.contour.y === st.contour.x) {
      st.contour.y = names.find((n) => n !== st.contour.x) || null;
    }
    for (const [sel, value] of [[cxSel, st.contour.x], [cySel, st.contour.y]]) {
      replace(sel, ...names.map((n) => h("option", { value: n }, n)));
      if (value) sel.value = value;
    }
  }

  async function contour() {
    if (!st.importance) await importance();
    const { x, y } = st.contour;
    if (!x || !y) {
      renderContour(contourEl, null, st.search?.metric);
      return;
    }
    const data = await api(`/searches/${id}/landscape?x=${encodeURIComponent(x)}&y=${encodeURIComponent(y)}`);
    // Axes picked again while this was on its way: the newer request draws.
    if (x === st.contour.x && y === st.contour.y) renderContour(contourEl, data, st.search.metric);
  }

  /** Whether the search ranks by Pareto order: several objectives, or constraints. */
  const tradeOffs = () => {
    const spec = st.search?.spec || {};
    return (spec.metrics?.length || 0) > 1 || (spec.constraints?.length || 0) > 0;
  };

  async function pareto() {
    if (!st.search) await summary();
    const on = tradeOffs();
    paretoPanel.hidden = !on;
    hvPanel.hidden = !on;
    if (!on) return;
    const data = await api(`/searches/${id}/pareto`);
    st.pareto = data;
    drawPareto();
    const ref = data.reference ? Object.entries(data.reference).map(([k, v]) => `${k} ${fmtNum(v)}`).join(", ") : "none yet";
    replace(
      paretoInfo,
      [countsLine(data.trials, "trials"), countsLine(data.counts, "points")].filter(Boolean).join(" · ") || "no point yet",
      h("div", { class: "sub" }, `reference: ${ref}${data.reference_derived ? " (derived from the points: the spec gives none)" : ""}`),
    );
    const sr = st.search;
    const until = nowOrEnd() ? nowOrEnd() - (sr.started_at ?? sr.created_at) : null;
    hvChart.update(data.hypervolume_curve || [], { name: "hypervolume", goal: "maximize", target: sr.spec?.target?.hypervolume ?? null }, until);
  }

  function drawPareto() {
    if (!st.pareto) return;
    renderPareto(paretoEl, st.pareto, (tid) => {
      window.location.hash = `#/trial/${Number(tid)}`;
    });
  }

  async function lineage() {
    const data = await api(`/searches/${id}/lineage`);
    st.lineage = data;
    lineagePanel.hidden = !hasLineage(data);
    drawLineage();
  }

  function drawLineage() {
    if (!st.lineage || lineagePanel.hidden) return;
    renderLineage(lineageEl, st.lineage, (tid) => {
      window.location.hash = `#/trial/${Number(tid)}`;
    });
  }

  function drawParcoords() {
    if (!st.search) return;
    renderParcoords(pcEl, st.allTrials, st.search.metric, bestId(), (tid) => table.highlight(tid), st.search.spec?.space);
  }

  // The SVG views are drawn for the width they have: draw them again when it changes.
  let lastWidth = root.clientWidth;
  const redraw = debounce(() => {
    if (st.disposed || root.clientWidth === lastWidth) return;
    lastWidth = root.clientWidth;
    drawGantt();
    drawParcoords();
    drawSlices();
    drawPareto();
    drawLineage();
  }, 200);
  const ro = new ResizeObserver(redraw);
  ro.observe(root);

  async function timeline() {
    const data = await api(`/searches/${id}/timeline`);
    if (!st.search) await summary();
    st.timeline = data;
    drawGantt();
  }

  function drawGantt() {
    const data = st.timeline;
    if (!data || !st.search) return;
    // While the search runs, the cluster's idle devices are lanes too; afterwards only those it used.
    const devices = ACTIVE.has(st.search.status) ? (st.cluster?.devices || []).map((d) => d.id) : [];
    renderGantt(ganttEl, data, st.trials, {
      devices,
      now: ACTIVE.has(st.search.status) ? Date.now() / 1000 : null,
      bestId: bestId(),
      t0: st.search.started_at ?? st.search.created_at,
    });
  }

  async function cluster() {
    if (!active()) return; // a finished search has nothing running: the panel is hidden
    const data = await api("/cluster");
    st.cluster = data;
    const rows = (data.devices || []).map((d) =>
      h(
        "tr",
        {},
        h("td", {}, String(d.id)),
        h("td", {}, String(d.node ?? "")),
        h("td", {}, String(d.kind ?? "")),
        h("td", {}, (d.running || []).length ? (d.running || []).map((t) => h("span", { class: "chip run" }, String(t))) : "idle"),
        h("td", {}, (d.parked || []).map((t) => h("span", { class: "chip park" }, String(t)))),
      ),
    );
    const pairs = (data.pairs || []).map((p) => {
      if (p && typeof p === "object" && "a" in p && "b" in p) {
        const rel = (r, solo) => (typeof r === "number" && typeof solo === "number" && solo > 0 ? ` ${fmtNum((100 * r) / solo, 3)}% of solo` : "");
        const gain = typeof p.gain === "number" ? p.gain : null;
        return h(
          "li",
          {},
          `trials ${p.a} + ${p.b}: `,
          h("b", { class: gain !== null && gain > 1 ? "gain-good" : "gain-bad" }, gain !== null ? `gain ${fmtNum(gain, 3)}` : "gain —"),
          ` (${p.a}:${rel(p.rate_a, p.solo_a) || ` ${fmtNum(p.rate_a, 3)} steps/s`}; ${p.b}:${rel(p.rate_b, p.solo_b) || ` ${fmtNum(p.rate_b, 3)} steps/s`})`,
        );
      }
      return h("li", {}, typeof p === "object" && p !== null ? Object.entries(p).map(([k, v]) => `${k}=${typeof v === "number" ? fmtNum(v, 3) : JSON.stringify(v)}`).join(", ") : String(p));
    });
    replace(
      clusterEl,
      h("table", { class: "cluster-table" }, h("thead", {}, h("tr", {}, ...["device", "node", "kind", "running", "parked"].map((c) => h("th", {}, c)))), h("tbody", {}, ...rows)),
      pairs.length ? h("div", {}, h("h4", {}, "Packed pairs (measured)"), h("ul", { class: "pairs" }, ...pairs)) : "",
    );
  }

  const r = refresher({ summary, best, curves, trials: allTrials, table: async () => drawFromTrials(), timeline, cluster, importance, contour, pareto, lineage }, 800);

  (async () => {
    try {
      await summary();
      await Promise.all([allTrials(), cluster()]);
      await Promise.all([best(), curves(), timeline(), pareto(), lineage()]);
      await importance();
      await contour();
    } catch (e) {
      if (e.status === 404) replace(root, h("div", { class: "crumbs" }, h("a", { href: "#/" }, "← all searches")), h("div", { class: "error" }, `Search ${id} does not exist.`));
      else showError(root, e);
    }
  })();

  const mine = (data) => {
    if (!data || typeof data !== "object") return true;
    const sid = data.search_id ?? data.search ?? null;
    return sid === null || sid === undefined || Number(sid) === id;
  };

  return {
    onEvent(kind, data) {
      if (kind === "search") {
        const sid = data?.search_id ?? data?.id;
        if (sid === undefined || Number(sid) === id) r.mark("summary", "best", "timeline", "cluster", "table");
      } else if (kind === "trial") {
        if (!mine(data)) return;
        const news = takeTrial(data);
        r.mark("summary", "table", "curves", "timeline", "cluster", "importance", "contour", "pareto", "lineage");
        // A new trial or status moves the parallel coordinates and slices: those redraw from a refetch.
        if (news) r.mark("trials");
      } else if (kind === "report") {
        if (mine(data)) r.mark("summary", "best", "curves", "pareto");
      } else r.mark("summary", "best", "curves", "trials", "timeline", "cluster", "importance", "contour", "pareto", "lineage");
    },
    poll() {
      if (active()) r.mark("summary", "best", "curves", "trials", "timeline", "cluster", "importance", "contour", "pareto", "lineage");
    },
    dispose() {
      st.disposed = true;
      r.dispose();
      ro.disconnect();
      redraw.cancel();
      bestChart.dispose();
      curvesChart.dispose();
      hvChart.dispose();
    },
  };
}
