// A trial's page (#/trial/<id>): its status and numbers, its learning curve (any metric it reported)
// with its config changes marked at their steps (a fork's values, a population's exploits, values set
// while it ran: from its search's lineage), its parent when it was forked, its config, its quanta (the measured stretches of computing it ran in: where, when, how fast, packed
// beside whom) and its log (stdout and stderr as the service keeps them). Followed live while it runs.

import { api } from "./api.js";
import { h, replace, clear, flatten, fmtNum, fmtDuration, fmtTime } from "./dom.js";
import { TrialChart } from "./charts.js";
import { whyEnded } from "./trialtable.js";
import { ACTIVE, TRIAL_ACTIVE, goalArrow, panel, refresher, showError, stat, statusBadge } from "./views.js";
import { changeText } from "./lineage.js";

const LOG_TAIL = 64 * 1024; // bytes of log shown at first
const LOG_ALL = 8 << 20; // the most the service keeps of a trial's log

export function trialView(root, id) {
  const st = { trial: null, search: null, metric: null, logTail: LOG_TAIL, disposed: false, changes: [] };

  const crumbs = h("div", { class: "crumbs" }, h("a", { href: "#/" }, "← all searches"));
  const title = h("h2", { class: "search-name", id: "trial-name" }, `Trial ${id}`);
  const badge = h("span");
  const actions = h("div", { class: "actions" });
  const errorBox = h("pre", { class: "error trial-error", id: "trial-error", hidden: true });
  const stats = h("div", { class: "stats" });
  const metricSel = h("select", { id: "trial-metric", title: "which reported metric to draw" });
  const curveEl = h("div", { class: "chart", id: "trial-curve" });
  const changesEl = h("div", { class: "hint", id: "trial-changes" });
  const configEl = h("div", { id: "trial-config" });
  const quantaEl = h("div", { id: "trial-quanta" });
  const quantaHint = h("span", { class: "muted" });
  const logEl = h("pre", { class: "log", id: "trial-log" });
  const logHint = h("span", { class: "muted", id: "trial-log-hint" });
  const logMore = h("button", { class: "link-button", id: "trial-log-all", hidden: true }, "show all of it");

  replace(
    root,
    crumbs,
    h("div", { class: "search-head" }, h("div", { class: "title-row" }, title, badge), actions),
    errorBox,
    stats,
    h(
      "div",
      { class: "grid" },
      panel("Learning curve", "", null, h("div", { class: "contour-pick" }, "metric ", metricSel), curveEl, changesEl),
      panel("Config", "the parameters it was given", null, configEl),
    ),
    panel("Quanta", "", null, h("div", { class: "panel-note" }, quantaHint), quantaEl),
    panel("Log", "its stdout and stderr", null, h("div", { class: "panel-note" }, logHint, " ", logMore), logEl),
  );
  const chart = new TrialChart(curveEl);
  metricSel.addEventListener("change", () => {
    st.metric = metricSel.value;
    drawCurve();
  });
  logMore.addEventListener("click", () => {
    st.logTail = LOG_ALL;
    r.now("log");
  });

  const active = () => !st.trial || TRIAL_ACTIVE.has(st.trial.status);

  // ------------ parts
  async function detail() {
    const t = await api(`/trials/${id}`);
    st.trial = t;
    if (!st.search || ACTIVE.has(st.search.status)) await search();
    const sr = st.search;
    const isBest = sr?.best?.trial_id === t.id;
    document.title = `trial ${t.id} · ${sr?.name ?? ""} · Quanta`;
    title.textContent = `Trial ${t.id}`;
    replace(
      badge,
      statusBadge(t.status),
      isBest ? h("span", { class: "best-tag" }, " best of its search") : "",
      h("span", { class: "muted" }, ` · #${t.number} of `, h("a", { href: `#/search/${Number(t.search_id)}`, id: "trial-search" }, sr?.name ?? `search ${t.search_id}`)),
    );
    replace(crumbs, h("a", { href: "#/" }, "← all searches"), " / ", h("a", { href: `#/search/${Number(t.search_id)}` }, sr?.name ?? `search ${t.search_id}`));
    clear(actions);
    if (TRIAL_ACTIVE.has(t.status)) {
      actions.appendChild(
        h("button", {
          class: "danger",
          "data-action": "stop",
          onclick: async (ev) => {
            if (!confirm(`Stop trial ${t.id}? Its search goes on.`)) return;
            ev.target.disabled = true;
            try {
              await api(`/trials/${id}/stop`, { method: "POST" });
            } catch (e) {
              errorBox.hidden = false;
              errorBox.textContent = String(e.message || e);
            }
            r.mark("detail");
          },
        }, "Stop trial"),
      );
    }
    await changes(t, sr);
    const why = whyEnded(t);
    errorBox.hidden = !(t.status === "failed" && why);
    errorBox.textContent = t.status === "failed" ? why : "";

    const m = sr?.metric || {};
    const maxSteps = sr?.spec?.budget?.max_steps;
    const end = t.finished_at ?? (TRIAL_ACTIVE.has(t.status) && t.started_at ? Date.now() / 1000 : null);
    replace(
      stats,
      stat(`${m.name || "metric"} (last) ${goalArrow(m)}`, fmtNum(t.metric), h("div", { class: "sub" }, `best ${fmtNum(t.best_metric)}`)),
      stat("steps", h("span", { id: "trial-steps" }, String(t.steps ?? 0)), h("div", { class: "sub" }, maxSteps ? `of ${maxSteps}` : "")),
      stat("device time", fmtDuration(t.device_seconds), h("div", { class: "sub" }, `${t.quanta.length} quanta, ${t.retries ?? 0} retries`)),
      stat("elapsed", end && t.started_at ? fmtDuration(end - t.started_at) : "—", h("div", { class: "sub" }, t.started_at ? `started ${fmtTime(t.started_at)}` : "not started")),
      stat("ended", t.finished_at ? fmtTime(t.finished_at) : "—", h("div", { class: "sub", id: "trial-why", title: why }, why.length > 160 ? `${why.slice(0, 159)}…` : why || (t.finished_at ? t.status : ""))),
    );
    drawMetricChoices();
    drawCurve();
    drawConfig();
    drawQuanta();
  }

  /** Its config changes and where it came from (the search's lineage; none to fetch for a search without
   * mutable parameters and a trial nobody forked). */
  async function changes(t, sr) {
    if (!(sr?.spec?.mutable || []).length && (t.parent_id === null || t.parent_id === undefined)) {
      st.changes = [];
    } else {
      const lineage = await api(`/searches/${Number(t.search_id)}/lineage`);
      st.changes = (lineage.trials || []).find((x) => x.id === t.id)?.changes || [];
    }
    const from = t.parent_id !== null && t.parent_id !== undefined
      ? h("span", { id: "trial-parent" }, "forked from ", h("a", { href: `#/trial/${Number(t.parent_id)}` }, `trial ${t.parent_id}`), t.fork_step !== null && t.fork_step !== undefined ? ` at step ${t.fork_step}` : " (its state is being taken)")
      : "";
    replace(
      changesEl,
      from,
      from && st.changes.length ? " · " : "",
      st.changes.length ? `config changes: ${st.changes.map(changeText).join("; ")}` : "",
    );
  }

  async function search() {
    st.search = await api(`/searches/${Number(st.trial.search_id)}`);
  }

  function metricNames() {
    const names = new Set();
    for (const p of st.trial?.curve || []) for (const [k, v] of Object.entries(p.metrics || {})) if (typeof v === "number") names.add(k);
    return [...names].sort();
  }

  function drawMetricChoices() {
    const names = metricNames();
    const objective = st.search?.metric?.name;
    if (!st.metric || !names.includes(st.metric)) st.metric = names.includes(objective) ? objective : names[0] || objective || null;
    replace(metricSel, ...names.map((n) => h("option", { value: n }, n === objective ? `${n} (objective)` : n)));
    if (st.metric) metricSel.value = st.metric;
  }

  function drawCurve() {
    const name = st.metric || st.search?.metric?.name || "metric";
    const pts = (st.trial?.curve || []).map((p) => [p.step, p.metrics?.[name] ?? null]);
    const target = name === st.search?.metric?.name ? st.search?.metric?.target ?? null : null;
    chart.update(pts, name, target, st.changes);
  }

  function drawConfig() {
    const flat = flatten(st.trial?.params || {});
    const rows = Object.entries(flat).map(([k, v]) =>
      h("tr", { "data-param": k }, h("td", { class: "key" }, k), h("td", { class: `value${typeof v === "number" ? " num" : ""}` }, v === null || v === undefined ? "—" : String(v))),
    );
    replace(
      configEl,
      rows.length ? h("table", { class: "config" }, h("tbody", {}, ...rows)) : h("div", { class: "empty" }, "No parameters."),
      h("details", {}, h("summary", {}, "as JSON"), h("pre", { class: "spec" }, JSON.stringify(st.trial?.params ?? {}, null, 2))),
    );
  }

  function drawQuanta() {
    const qs = st.trial?.quanta || [];
    if (!qs.length) {
      quantaHint.textContent = "";
      replace(quantaEl, h("div", { class: "empty" }, TRIAL_ACTIVE.has(st.trial?.status) ? "No quantum measured yet." : "It ran in no measured quantum."));
      return;
    }
    const t0 = Math.min(...qs.map((q) => q.started_at));
    const busy = qs.reduce((a, q) => a + Math.max(0, q.ended_at - q.started_at), 0);
    const span = Math.max(...qs.map((q) => q.ended_at)) - t0;
    const packed = qs.filter((q) => (q.packed_with || []).length).length;
    quantaHint.textContent = `${qs.length} quanta, ${fmtDuration(busy)} running over ${fmtDuration(span)} (the rest parked or queued)${packed ? `; ${packed} packed beside other trials` : ""}`;
    const rows = qs.map((q, i) =>
      h(
        "tr",
        { "data-quantum": i + 1 },
        h("td", { class: "num" }, String(i + 1)),
        h("td", {}, (q.devices || []).join(", ")),
        h("td", { class: "num" }, `${fmtNum(q.started_at - t0, 3)} s`),
        h("td", { class: "num" }, `${fmtNum(q.ended_at - q.started_at, 3)} s`),
        h("td", { class: "num" }, String(q.steps)),
        h("td", { class: "num" }, fmtNum(q.rate, 3)),
        h("td", {}, ...(q.packed_with || []).flatMap((p, k) => [k ? ", " : "", h("a", { href: `#/trial/${Number(p)}` }, String(p))])),
      ),
    );
    replace(
      quantaEl,
      h(
        "div",
        { class: "table-scroll short" },
        h("table", { class: "quanta" }, h("thead", {}, h("tr", {}, ...["#", "devices", "from", "for", "steps", "steps/s", "packed with"].map((c) => h("th", {}, c)))), h("tbody", {}, ...rows)),
      ),
    );
  }

  async function log() {
    const resp = await fetchLog(id, st.logTail);
    const atBottom = logEl.scrollTop + logEl.clientHeight >= logEl.scrollHeight - 4;
    logEl.textContent = resp || "";
    logEl.classList.toggle("empty-log", !resp);
    if (!resp) logEl.textContent = active() ? "Nothing written yet." : "It wrote nothing.";
    const bytes = new TextEncoder().encode(resp || "").length;
    const cut = st.logTail < LOG_ALL && bytes >= st.logTail * 0.9;
    const size = bytes < 1024 ? `${bytes} bytes` : `${fmtNum(bytes / 1024, 3)} KiB`;
    logHint.textContent = resp ? `${cut ? "the last " : ""}${size}${active() ? ", growing" : ""}` : "";
    logMore.hidden = !cut;
    if (atBottom) logEl.scrollTop = logEl.scrollHeight;
  }

  const r = refresher({ detail, log }, 800);

  (async () => {
    try {
      await detail();
      await log();
    } catch (e) {
      if (e.status === 404) replace(root, h("div", { class: "crumbs" }, h("a", { href: "#/" }, "← all searches")), h("div", { class: "error" }, `Trial ${id} does not exist.`));
      else showError(root, e);
    }
  })();

  return {
    onEvent(kind, data) {
      if (kind === "trial" && Number(data?.id) === id) r.mark("detail", "log");
      else if (kind === "report" && Number(data?.trial_id) === id) r.mark("detail", "log");
      else if (kind === "search" && st.trial && Number(data?.id) === st.trial.search_id) r.mark("detail");
    },
    poll() {
      if (active()) r.mark("detail", "log");
    },
    dispose() {
      st.disposed = true;
      r.dispose();
      chart.dispose();
    },
  };
}

/** The trial's log as text (the API answers text/plain). */
async function fetchLog(id, tail) {
  return api(`/trials/${id}/logs?tail=${tail}`, { text: true });
}
