// Searches side by side (#/compare/<id>,<id>,...): their best-so-far curves on one chart (seconds since
// each started), and a table of what they are and found: status, best value and trial, progress, the
// best trial's config, and every field of their specs, the rows where they differ marked.

import { api } from "./api.js";
import { h, replace, clear, flatten, fmtNum, fmtDuration } from "./dom.js";
import { CompareChart, compareColor } from "./charts.js";
import { ACTIVE, panel, refresher, showError, statusBadge } from "./views.js";

/** The ids in a compare address ("3,5,9"): positive integers, each once, in the given order. */
export function compareIds(text) {
  const out = [];
  for (const part of String(text || "").split(",")) {
    const n = Number(part);
    if (Number.isInteger(n) && n > 0 && !out.includes(n)) out.push(n);
  }
  return out;
}

function hashFor(ids) {
  return `#/compare/${ids.join(",")}`;
}

export function compareView(root, ids) {
  const st = { runs: new Map(), missing: [], disposed: false, onlyDiff: false };
  const chartEl = h("div", { class: "chart", id: "compare-best" });
  const chartHint = h("div", { class: "hint" });
  const tableEl = h("div", { id: "compare-config", class: "table-scroll" });
  const missingEl = h("div", { class: "error", hidden: true });
  const diffBox = h("input", { type: "checkbox", id: "compare-diff" });
  diffBox.addEventListener("change", () => {
    st.onlyDiff = diffBox.checked;
    drawTable();
  });
  const addSel = h("select", { id: "compare-add", title: "add a search" }, h("option", { value: "" }, "add a search…"));
  addSel.addEventListener("change", () => {
    const n = Number(addSel.value);
    if (n) window.location.hash = hashFor([...ids, n]);
  });

  replace(
    root,
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "← all searches")),
    h("div", { class: "search-head" }, h("div", { class: "title-row" }, h("h2", { class: "search-name", id: "compare-title" }, `Comparing ${ids.length} searches`)), h("div", { class: "actions" }, addSel)),
    missingEl,
    panel("Best so far", "each search's best metric versus seconds since it started", null, chartEl, chartHint),
    panel("Side by side", "", null, h("label", { class: "muted diff-pick" }, diffBox, " only the rows where they differ"), tableEl),
  );
  const chart = new CompareChart(chartEl);

  async function load(sid) {
    try {
      const [search, best] = await Promise.all([api(`/searches/${sid}`), api(`/searches/${sid}/best`)]);
      st.runs.set(sid, { search, best });
    } catch (e) {
      if (e.status !== 404) throw e;
      st.runs.delete(sid);
      if (!st.missing.includes(sid)) st.missing.push(sid);
    }
  }

  async function all() {
    await Promise.all(ids.map(load));
    if (st.disposed) return;
    missingEl.hidden = !st.missing.length;
    missingEl.textContent = st.missing.length ? `No such search (or not yours): ${st.missing.join(", ")}` : "";
    drawChart();
    drawTable();
  }

  function shown() {
    return ids.filter((sid) => st.runs.has(sid)).map((sid, i) => ({ sid, colour: compareColor(i), ...st.runs.get(sid) }));
  }

  function drawChart() {
    const runs = shown();
    const names = [...new Set(runs.map((r) => r.search.metric?.name).filter(Boolean))];
    const label = names.length === 1 ? `best ${names[0]}` : `best (${names.join(", ") || "metric"})`;
    const drawn = chart.update(
      runs.map((r) => {
        const sr = r.search;
        const end = sr.finished_at ?? (ACTIVE.has(sr.status) ? Date.now() / 1000 : null);
        return { label: `${sr.name} (#${sr.id})`, points: r.best.points || [], until: end ? end - (sr.started_at ?? sr.created_at) : null };
      }),
      label,
    );
    const goals = new Set(runs.map((r) => r.search.metric?.goal));
    chartHint.textContent =
      (names.length > 1 ? "These searches optimise different metrics: their values are not comparable. " : "") +
      (goals.size > 1 ? "Their goals differ (maximize and minimize). " : "") +
      (drawn !== undefined && drawn < runs.length ? `${runs.length - drawn} of them reported no value yet.` : "");
  }

  function drawTable() {
    const runs = shown();
    if (!runs.length) {
      replace(tableEl, h("div", { class: "empty" }, "Nothing to compare."));
      return;
    }
    const rows = []; // [group, label, values per run (strings)]
    const add = (group, label, get) => rows.push([group, label, runs.map((r) => get(r))]);
    const num = (v) => (v === null || v === undefined ? "—" : fmtNum(v));
    add("result", "status", (r) => r.search.status);
    add("result", "best", (r) => (r.search.best ? `${r.search.metric?.name || "metric"} ${num(r.search.best.metric)}` : "—"));
    add("result", "best trial", (r) => (r.search.best ? String(r.search.best.trial_id) : "—"));
    add("result", "target", (r) => (r.search.reached ? `reached after ${fmtDuration(r.search.seconds_to_target)}` : "not reached"));
    add("result", "trials done", (r) => `${r.search.progress?.trials_done ?? 0} of ${r.search.progress?.trials_created ?? 0} created`);
    add("result", "elapsed", (r) => {
      const sr = r.search;
      const end = sr.finished_at ?? (ACTIVE.has(sr.status) ? Date.now() / 1000 : null);
      return end ? fmtDuration(end - (sr.started_at ?? sr.created_at)) : "—";
    });
    add("result", "owner", (r) => r.search.owner || "—");
    const bestKeys = [...new Set(runs.flatMap((r) => Object.keys(flatten(r.search.best?.params || {}))))].sort();
    for (const k of bestKeys) {
      add("best config", k, (r) => {
        const v = r.search.best ? flatten(r.search.best.params || {})[k] : undefined;
        return v === undefined || v === null ? "—" : typeof v === "number" ? fmtNum(v) : String(v);
      });
    }
    const specs = runs.map((r) => flatten(r.search.spec || {}));
    const specKeys = [...new Set(specs.flatMap((f) => Object.keys(f)))].sort();
    for (const k of specKeys) {
      add("spec", k, (r) => {
        const v = specs[runs.indexOf(r)][k];
        return v === undefined || v === null ? "—" : String(v);
      });
    }

    const head = h(
      "tr",
      {},
      h("th", {}, ""),
      ...runs.map((r) =>
        h(
          "th",
          { "data-search-id": r.sid, class: "run" },
          h("span", { class: "key", style: `background:${r.colour}` }),
          h("a", { href: `#/search/${Number(r.sid)}` }, r.search.name),
          ` #${r.sid} `,
          statusBadge(r.search.status),
          ids.length > 2 ? h("a", { href: hashFor(ids.filter((x) => x !== r.sid)), class: "drop", title: "leave it out" }, " ×") : "",
        ),
      ),
    );
    const body = h("tbody");
    let group = null;
    for (const [g, label, values] of rows) {
      const differs = new Set(values).size > 1;
      if (st.onlyDiff && !differs && g !== "result") continue;
      if (g !== group) {
        group = g;
        body.appendChild(h("tr", { class: "group" }, h("th", { colspan: runs.length + 1 }, g)));
      }
      body.appendChild(
        h(
          "tr",
          { class: differs ? "differs" : "", "data-row": `${g}:${label}` },
          h("th", { class: "row-label" }, label),
          ...values.map((v) => h("td", { class: "cmp" }, v)),
        ),
      );
    }
    replace(tableEl, h("table", { class: "compare" }, h("thead", {}, head), body));
  }

  async function choices() {
    const data = await api("/searches?limit=200");
    clear(addSel);
    addSel.appendChild(h("option", { value: "" }, "add a search…"));
    for (const sr of data.items || []) {
      if (!ids.includes(Number(sr.id))) addSel.appendChild(h("option", { value: String(sr.id) }, `#${sr.id} ${sr.name}`));
    }
  }

  const r = refresher({ all, choices }, 800);
  (async () => {
    try {
      await all();
      await choices();
    } catch (e) {
      showError(root, e);
    }
  })();

  return {
    onEvent(kind, data) {
      if (kind === "search" && ids.includes(Number(data?.id))) r.mark("all");
      else if (kind === "message") r.mark("all");
    },
    poll() {
      if ([...st.runs.values()].some((x) => ACTIVE.has(x.search.status))) r.mark("all");
    },
    dispose() {
      st.disposed = true;
      r.dispose();
      chart.dispose();
    },
  };
}
