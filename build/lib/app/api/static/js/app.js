// Quanta dashboard: token form, searches list (#/), search page (#/search/<id>), live through /events.

import { api, AuthError, adoptTokenFromUrl, getToken, setToken, clearToken, checkToken, subscribe } from "./api.js";
import { h, replace, clear, fmtNum, fmtDuration, fmtTime, paramsText, debounce } from "./dom.js";
import { BestChart, CurvesChart } from "./charts.js";
import { renderGantt } from "./gantt.js";
import { renderParcoords } from "./parcoords.js";
import { renderImportance, renderSlices, renderContour } from "./landscape.js";

const root = document.getElementById("app");
const connEl = document.getElementById("conn");
const logoutEl = document.getElementById("logout");
const whoamiEl = document.getElementById("whoami");
let me = null; // the signed-in user: {name, role, ...} from /me
let ownerFilter = ""; // an admin's per-user view: "" = every user's searches

const ACTIVE = new Set(["queued", "running", "paused"]);
let view = null; // the current view: {dispose(), onEvent(kind, data), poll()}
let unsubscribe = null;
let connState = "down";

// ---------------------------------------------------------------- helpers

function statusBadge(status) {
  return h("span", { class: `badge st-${String(status).replace(/[^a-z]/g, "")}` }, status);
}

function goalArrow(metric) {
  if (!metric) return "";
  return metric.goal === "minimize" ? "↓" : "↑";
}

function progressBar(p) {
  const max = p?.max_trials || 0;
  const done = p?.trials_done || 0;
  const created = p?.trials_created || 0;
  const pct = max ? Math.min(100, (100 * done) / max) : 0;
  const pctCreated = max ? Math.min(100, (100 * created) / max) : 0;
  return h(
    "div",
    { class: "progress", title: `${done} done, ${created} created of at most ${max} trials` },
    h("div", { class: "bar" }, h("div", { class: "created", style: `width:${pctCreated.toFixed(1)}%` }), h("div", { class: "done", style: `width:${pct.toFixed(1)}%` })),
    h("span", { class: "ptext" }, `${done}/${max}`),
  );
}

function showError(container, err) {
  if (err instanceof AuthError) return needToken("The stored token was refused; enter a valid one.");
  replace(container, h("div", { class: "error" }, String(err.message || err)));
}

function onRefreshError(part) {
  return (e) => {
    if (e instanceof AuthError) needToken("The stored token was refused; enter a valid one.");
    else console.warn(`refresh ${part}:`, e.message || e);
  };
}

/** Coalesce refreshes: parts marked dirty are refreshed together at most every `ms`. */
function refresher(parts, ms = 700) {
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

// ---------------------------------------------------------------- token form

function needToken(message) {
  if (view) view.dispose();
  view = null;
  if (unsubscribe) unsubscribe();
  unsubscribe = null;
  setConn("down");
  connEl.textContent = "";
  logoutEl.hidden = true;
  whoamiEl.hidden = true;
  me = null;
  clearToken();
  const input = h("input", { type: "password", name: "token", id: "token-input", placeholder: "API token", autocomplete: "off" });
  const msg = h("div", { class: "form-msg" }, message || "");
  const form = h(
    "form",
    { class: "token-form", id: "token-form" },
    h("h2", {}, "Sign in"),
    h("p", {}, "Paste the API token that ", h("code", {}, "quanta serve"), " printed (or set in QUANTA_TOKEN). It is kept in this browser's local storage."),
    h("label", { for: "token-input" }, "Token"),
    input,
    h("button", { type: "submit" }, "Open dashboard"),
    msg,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    msg.textContent = "Checking…";
    try {
      if (await checkToken(token)) {
        setToken(token);
        start();
      } else msg.textContent = "That token was refused.";
    } catch (e) {
      msg.textContent = `Cannot reach the API: ${e.message}`;
    }
  });
  replace(root, form);
  input.focus();
}

// ---------------------------------------------------------------- searches list

function listView() {
  const body = h("tbody");
  const count = h("span", { class: "muted" });
  const table = h(
    "table",
    { class: "searches", id: "searches" },
    h("thead", {}, h("tr", {}, ...["id", "name", "owner", "status", "best", "progress", "target", "created", "time"].map((c) => h("th", {}, c)))),
    body,
  );
  // Admins see every user's searches and may narrow the list to one user's.
  const filter = h("select", { class: "owner-filter", id: "owner-filter", title: "whose searches", hidden: "" }, h("option", { value: "" }, "all users"));
  filter.addEventListener("change", () => {
    ownerFilter = filter.value;
    refresh().catch((e) => showError(root, e));
  });
  if (me && me.role === "admin") {
    filter.hidden = false;
    api("/users")
      .then((users) => {
        for (const u of users) filter.appendChild(h("option", { value: u.name }, `${u.name} (${u.role})`));
        filter.value = ownerFilter;
      })
      .catch(onRefreshError("users"));
  }
  // Users' shares of device time (GET /shares): every user for an admin, a member's own row.
  const sharesBody = h("tbody");
  const sharesHint = h("span", { class: "muted" });
  const sharesTable = h(
    "table",
    { class: "shares", id: "shares" },
    h("thead", {}, h("tr", {}, ...[["user"], ["weight"], ["devices", "devices held at the last plan / fair share then"], ["device time", "share of all users' device time over the last 5 minutes (stored quanta)"], ["rho", "finish-time fairness (Themis): fair-share device time over device time had; above 1 = behind"]].map(([c, t]) => h("th", t ? { title: t } : {}, c)))),
    sharesBody,
  );
  replace(
    root,
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Searches"), filter, count), table),
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h3", {}, me && me.role === "admin" ? "Users' shares" : "Your share"), sharesHint), sharesTable),
  );

  async function refreshShares() {
    const data = await api("/shares?window_s=300");
    const users = data.users || [];
    sharesHint.textContent = `${data.devices} devices; device time over the last ${fmtDuration(data.window_s)}`;
    clear(sharesBody);
    if (!users.length) {
      sharesBody.appendChild(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No users with device time yet.")));
      return;
    }
    for (const u of users) {
      const devices = u.devices === null || u.devices === undefined ? "—" : `${fmtNum(u.devices, 3)} / ${fmtNum(u.fair_devices, 3)}`;
      const share = u.share === null || u.share === undefined ? "—" : `${fmtNum(100 * u.share, 3)}% (${fmtDuration(u.device_s)})`;
      const rho = u.rho === null || u.rho === undefined ? "—" : u.rho >= 1e6 ? "∞" : fmtNum(u.rho, 3);
      sharesBody.appendChild(
        h(
          "tr",
          { "data-user": u.name },
          h("td", { class: "name" }, u.name || "—"),
          h("td", { class: "num" }, fmtNum(u.weight, 3)),
          h("td", { class: "num devices" }, devices),
          h("td", { class: "num share" }, share),
          h("td", { class: `num rho${u.rho > 1.3 ? " rho-behind" : ""}` }, rho),
        ),
      );
    }
  }

  async function refresh() {
    const owner = me && me.role === "admin" && ownerFilter ? `&owner=${encodeURIComponent(ownerFilter)}` : "";
    const data = await api(`/searches?limit=200${owner}`);
    const items = data.items || [];
    count.textContent = `${data.total ?? items.length} total`;
    clear(body);
    if (!items.length) {
      body.appendChild(h("tr", {}, h("td", { colspan: 9, class: "empty" }, "No searches yet. Post a spec to /api/v1/searches or run `quanta submit`.")));
      return;
    }
    for (const sr of items) {
      const m = sr.metric || {};
      const end = sr.finished_at || (ACTIVE.has(sr.status) ? Date.now() / 1000 : null);
      const link = h("a", { href: `#/search/${Number(sr.id)}`, class: "search-link" }, sr.name);
      body.appendChild(
        h(
          "tr",
          { "data-search-id": sr.id },
          h("td", { class: "num" }, String(sr.id)),
          h("td", { class: "name" }, link),
          h("td", { class: "owner" }, sr.owner || ""),
          h("td", { title: sr.waiting || "" }, statusBadge(sr.status), sr.waiting ? h("span", { class: "waiting muted" }, ` ${sr.waiting}`) : "", sr.reached ? h("span", { class: "reached", title: "target reached" }, " ✓") : ""),
          h("td", { class: "num", title: sr.best ? paramsText(sr.best.params) : "" }, sr.best ? `${m.name} ${goalArrow(m)} ${fmtNum(sr.best.metric)}` : "—"),
          h("td", {}, progressBar(sr.progress)),
          h("td", { class: "num" }, m.target !== null && m.target !== undefined ? fmtNum(m.target) : "—"),
          h("td", {}, fmtTime(sr.created_at)),
          h("td", { class: "num" }, end ? fmtDuration(end - (sr.started_at ?? sr.created_at)) : "—"),
        ),
      );
    }
  }

  const r = refresher({ list: refresh, shares: refreshShares }, 800);
  refresh().catch((e) => showError(root, e));
  refreshShares().catch(onRefreshError("shares"));
  return {
    onEvent(kind) {
      if (kind === "search" || kind === "trial" || kind === "message") r.mark("list", "shares");
    },
    poll() {
      r.mark("list", "shares");
    },
    dispose() {
      r.dispose();
    },
  };
}

// ---------------------------------------------------------------- search page

const SORTABLE = { id: "id", steps: "steps", metric: "metric" };
const PAGE = 25;

function searchView(id) {
  const st = { search: null, trials: new Map(), allTrials: [], timeline: null, sort: "-id", offset: 0, cluster: null, disposed: false, importance: null, contour: { x: null, y: null } };

  const title = h("h2", { class: "search-name", id: "search-name" });
  const badge = h("span");
  const actions = h("div", { class: "actions" });
  const stats = h("div", { class: "stats" });
  const errorBox = h("div", { class: "error", hidden: true });
  const bestEl = h("div", { class: "chart", id: "chart-best" });
  const curvesEl = h("div", { class: "chart", id: "chart-curves" });
  const curvesInfo = h("div", { class: "hint" }, "Hover a curve to see its trial.");
  const ganttEl = h("div", { class: "gantt-wrap", id: "gantt" });
  const pcEl = h("div", { class: "pc-wrap", id: "parcoords" });
  const tableBody = h("tbody");
  const tableHead = h("tr");
  const pager = h("div", { class: "pager" });
  const clusterEl = h("div", { class: "cluster", id: "cluster" });
  const specEl = h("pre", { class: "spec" });
  const impEl = h("div", { class: "imp-wrap", id: "importance" });
  const slicesEl = h("div", { class: "slices-wrap", id: "slices" });
  const contourEl = h("div", { class: "contour-wrap", id: "contour" });
  const pickAxis = (which) => (ev) => {
    st.contour[which] = ev.target.value;
    r.now("contour");
  };
  const cxSel = h("select", { id: "contour-x", onchange: pickAxis("x") });
  const cySel = h("select", { id: "contour-y", onchange: pickAxis("y") });

  const panel = (titleText, hint, ...content) =>
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h3", {}, titleText), hint ? h("span", { class: "muted" }, hint) : ""), ...content);

  replace(
    root,
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "← all searches")),
    h("div", { class: "search-head" }, h("div", { class: "title-row" }, title, badge), actions),
    errorBox,
    stats,
    h(
      "div",
      { class: "grid" },
      panel("Best so far", "best metric versus time since start", bestEl),
      panel(
        "Learning curves",
        "",
        h("div", { class: "legend" }, h("span", { class: "key key-best" }), "best", h("span", { class: "key key-killed" }), "killed", h("span", { class: "key key-failed" }), "failed", h("span", { class: "key key-run" }), "other trials"),
        curvesEl,
        curvesInfo,
      ),
    ),
    panel("Device timeline", "each quantum: which trial ran on which device", ganttEl),
    panel("Params versus metric", "parallel coordinates, one line per trial", pcEl),
    h(
      "div",
      { class: "grid" },
      panel("Parameter importance", "how much the metric depends on each parameter", impEl),
      panel("Contour", "the metric over two parameters", h("div", { class: "contour-pick" }, "x ", cxSel, " y ", cySel), contourEl),
    ),
    panel("Slices", "each parameter against the metric, one dot per trial", slicesEl),
    panel("Trials", "", h("table", { class: "trials", id: "trials" }, h("thead", {}, tableHead), tableBody), pager),
    h("div", { class: "grid" }, panel("Cluster", "now", clusterEl), panel("Spec", "", h("details", {}, h("summary", {}, "show the posted spec"), specEl))),
  );

  const bestChart = new BestChart(bestEl);
  const curvesChart = new CurvesChart(curvesEl, curvesInfo);

  const bestId = () => st.search?.best?.trial_id ?? null;
  const nowOrEnd = () => {
    const sr = st.search;
    if (!sr) return null;
    if (sr.finished_at) return sr.finished_at;
    return ACTIVE.has(sr.status) ? Date.now() / 1000 : null;
  };

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
    if (sr.status === "running" || sr.status === "queued") actions.appendChild(btn("Pause", "pause"));
    if (sr.status === "paused") actions.appendChild(btn("Resume", "resume"));
    if (ACTIVE.has(sr.status)) actions.appendChild(btn("Stop", "stop", "danger"));

    const m = sr.metric || {};
    const p = sr.progress || {};
    const end = nowOrEnd();
    const stat = (label, ...value) => h("div", { class: "stat" }, h("div", { class: "label" }, label), h("div", { class: "value" }, ...value));
    replace(
      stats,
      stat(`best ${m.name || "metric"} ${goalArrow(m)}`, sr.best ? fmtNum(sr.best.metric) : "—", sr.best ? h("div", { class: "sub" }, `trial ${sr.best.trial_id}: ${paramsText(sr.best.params)}`) : ""),
      stat("target", m.target !== null && m.target !== undefined ? fmtNum(m.target) : "none", h("div", { class: "sub" }, sr.reached ? `reached after ${fmtDuration(sr.seconds_to_target)}` : "not reached")),
      stat("trials", `${p.trials_done ?? 0} done`, h("div", { class: "sub" }, `${p.trials_created ?? 0} created, at most ${p.max_trials ?? "?"}`), progressBar(p)),
      stat("elapsed", end ? fmtDuration(end - (sr.started_at ?? sr.created_at)) : "—", h("div", { class: "sub" }, `created ${fmtTime(sr.created_at)}`)),
      stat("policy", typeof sr.policy === "string" ? sr.policy : (sr.spec?.scheduler?.policy ?? "—"), h("div", { class: "sub" }, sr.spec?.trainable || "")),
    );
    specEl.textContent = JSON.stringify(sr.spec ?? {}, null, 2);
    if (sr.error) {
      errorBox.hidden = false;
      errorBox.textContent = `search error: ${sr.error}`;
    }
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
    // Every trial (for the parallel coordinates and the timeline's statuses), paged through.
    const out = [];
    let total = Infinity;
    while (out.length < total && out.length < 5000) {
      const page = await api(`/searches/${id}/trials?offset=${out.length}&limit=500&sort=id`);
      total = page.total ?? 0;
      if (!page.items || !page.items.length) break;
      out.push(...page.items);
    }
    st.allTrials = out;
    st.trials = new Map(out.map((t) => [t.id, t]));
    if (!st.search) await summary();
    drawParcoords();
    drawSlices();
  }

  function drawSlices() {
    if (!st.search) return;
    const order = (st.importance?.params || []).map((p) => p.name);
    renderSlices(slicesEl, st.allTrials, st.search.metric, st.search.spec?.space, order);
  }

  async function importance() {
    const data = await api(`/searches/${id}/importance`);
    if (!st.search) await summary();
    st.importance = data;
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
    renderContour(contourEl, data, st.search.metric);
  }

  function drawParcoords() {
    if (!st.search) return;
    renderParcoords(pcEl, st.allTrials, st.search.metric, bestId(), (tid) => highlightRow(tid), st.search.spec?.space);
  }

  // The SVG views are drawn for the width they have: draw them again when it changes.
  let lastWidth = root.clientWidth;
  const redraw = debounce(() => {
    if (st.disposed || root.clientWidth === lastWidth) return;
    lastWidth = root.clientWidth;
    drawGantt();
    drawParcoords();
    drawSlices();
  }, 200);
  const ro = new ResizeObserver(redraw);
  ro.observe(root);

  function highlightRow(tid) {
    for (const tr of tableBody.querySelectorAll("tr.picked")) tr.classList.remove("picked");
    const row = tableBody.querySelector(`tr[data-trial-id="${Number(tid)}"]`);
    if (row) {
      row.classList.add("picked");
      row.scrollIntoView({ block: "nearest", behavior: "smooth" });
    }
  }

  async function table() {
    const data = await api(`/searches/${id}/trials?offset=${st.offset}&limit=${PAGE}&sort=${encodeURIComponent(st.sort)}`);
    if (!st.search) await summary();
    const items = data.items || [];
    const total = data.total ?? items.length;
    const m = st.search.metric || {};
    // Header with sort toggles (the API sorts by id, metric and steps).
    clear(tableHead);
    const cols = [
      ["id", "id"],
      ["#", null],
      ["status", null],
      [`${m.name || "metric"} (last)`, "metric"],
      ["best", null],
      ["steps", "steps"],
      ["device s", null],
      ["retries", null],
      ["params", null],
      ["why it ended", null],
    ];
    for (const [label, key] of cols) {
      if (!key) {
        tableHead.appendChild(h("th", {}, label));
        continue;
      }
      const active = st.sort.replace("-", "") === key;
      const desc = st.sort.startsWith("-");
      const th = h(
        "th",
        { class: `sortable${active ? " active" : ""}`, "data-sort": key, title: `sort by ${key}` },
        label,
        active ? (desc ? " ▼" : " ▲") : "",
      );
      th.addEventListener("click", () => {
        st.sort = active && desc ? key : `-${key}`;
        st.offset = 0;
        r.now("table");
      });
      tableHead.appendChild(th);
    }
    clear(tableBody);
    if (!items.length) tableBody.appendChild(h("tr", {}, h("td", { colspan: cols.length, class: "empty" }, "No trials yet.")));
    for (const t of items) {
      // A failed trial's error; a killed trial's verdict; what stopped a stopped one.
      const err = String((t.status === "failed" ? t.error : t.reason || t.error) ?? "");
      tableBody.appendChild(
        h(
          "tr",
          { "data-trial-id": t.id, class: `trial st-row-${String(t.status).replace(/[^a-z]/g, "")}${t.id === bestId() ? " best" : ""}` },
          h("td", { class: "num" }, String(t.id)),
          h("td", { class: "num" }, String(t.number)),
          h("td", {}, statusBadge(t.status), t.id === bestId() ? h("span", { class: "best-tag" }, " best") : ""),
          h("td", { class: "num" }, fmtNum(t.metric)),
          h("td", { class: "num" }, fmtNum(t.best_metric)),
          h("td", { class: "num" }, String(t.steps ?? 0)),
          h("td", { class: "num" }, fmtNum(t.device_seconds, 3)),
          h("td", { class: "num" }, String(t.retries ?? 0)),
          h("td", { class: "params", title: JSON.stringify(t.params) }, paramsText(t.params)),
          h("td", { class: "err", title: err }, err.length > 80 ? `${err.slice(0, 79)}…` : err),
        ),
      );
    }
    clear(pager);
    const pages = Math.max(1, Math.ceil(total / PAGE));
    const pageNo = Math.floor(st.offset / PAGE) + 1;
    pager.appendChild(
      h("button", { disabled: st.offset === 0, onclick: () => { st.offset = Math.max(0, st.offset - PAGE); r.now("table"); } }, "‹ prev"),
    );
    pager.appendChild(h("span", { class: "muted" }, ` page ${pageNo} of ${pages} · ${total} trials `));
    pager.appendChild(
      h("button", { disabled: st.offset + PAGE >= total, onclick: () => { st.offset += PAGE; r.now("table"); } }, "next ›"),
    );
  }

  async function timeline() {
    const data = await api(`/searches/${id}/timeline`);
    if (!st.search) await summary();
    st.timeline = data;
    drawGantt();
  }

  function drawGantt() {
    const data = st.timeline;
    if (!data || !st.search) return;
    const devices = (st.cluster?.devices || []).map((d) => d.id);
    renderGantt(ganttEl, data, st.trials, {
      devices,
      now: ACTIVE.has(st.search.status) ? Date.now() / 1000 : null,
      bestId: bestId(),
      t0: st.search.started_at ?? st.search.created_at,
    });
  }

  async function cluster() {
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

  const r = refresher({ summary, best, curves, trials: allTrials, table, timeline, cluster, importance, contour }, 800);

  (async () => {
    try {
      await summary();
      await Promise.all([allTrials(), cluster()]);
      await Promise.all([best(), curves(), table(), timeline()]);
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
        if (sid === undefined || Number(sid) === id) r.mark("summary", "best", "timeline", "cluster");
      } else if (kind === "trial") {
        if (mine(data)) r.mark("summary", "trials", "table", "curves", "timeline", "cluster", "importance", "contour");
      } else if (kind === "report") {
        if (mine(data)) r.mark("summary", "best", "curves", "table");
      } else r.mark("summary", "best", "curves", "trials", "table", "timeline", "cluster", "importance", "contour");
    },
    poll() {
      if (!st.search || ACTIVE.has(st.search.status)) r.mark("summary", "best", "curves", "trials", "table", "timeline", "cluster", "importance", "contour");
    },
    dispose() {
      st.disposed = true;
      r.dispose();
      ro.disconnect();
      redraw.cancel();
      bestChart.dispose();
      curvesChart.dispose();
    },
  };
}

// ---------------------------------------------------------------- routing and live updates

function setConn(state) {
  connState = state;
  connEl.textContent = { live: "● live", connecting: "○ connecting…", down: "○ offline (polling)" }[state] || state;
  connEl.className = `conn conn-${state}`;
}

function route() {
  if (!getToken()) return needToken();
  if (view) view.dispose();
  const m = /^#\/search\/(\d+)/.exec(window.location.hash);
  view = m ? searchView(Number(m[1])) : listView();
}

async function whoami() {
  try {
    me = await api("/me");
    whoamiEl.textContent = `${me.name}${me.role === "admin" ? " (admin)" : ""}`;
    whoamiEl.hidden = false;
  } catch (e) {
    if (e instanceof AuthError) needToken("The stored token was refused; enter a valid one.");
  }
}

async function start() {
  logoutEl.hidden = false;
  await whoami();
  if (!getToken()) return;
  if (!unsubscribe) {
    unsubscribe = subscribe(
      (kind, data) => view && view.onEvent(kind, data),
      (state) => setConn(state),
    );
  }
  route();
}

window.addEventListener("hashchange", () => getToken() && route());
logoutEl.addEventListener("click", () => needToken("Signed out."));
// Poll as a fallback while the event stream is down, and slowly anyway (running bars grow with time).
let tick = 0;
setInterval(() => {
  tick++;
  if (!view || !getToken()) return;
  if (connState !== "live" || tick % 6 === 0) view.poll();
}, 5000);

adoptTokenFromUrl();
if (getToken()) start();
else needToken();
