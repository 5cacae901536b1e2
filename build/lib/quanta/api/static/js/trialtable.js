// The search page's trial table: every trial the page holds, sorted by any column (a click on its
// header; again for the other direction), narrowed by a status and by a filter box, shown a page at a
// time. A trial's id opens its own page (#/trial/<id>).
//
// The filter box takes terms separated by spaces, all of which must hold: `column<value` (also <=, >,
// >=, =, !=) on a column or a parameter by its dotted name (`lr<0.01`, `optim.name=adam`,
// `status!=killed`; `metric` is the objective), or a word that must appear in the trial's id, status,
// parameters or why it ended. Parsing and matching are pure functions (`parseFilter`, `sortTrials`).

import { h, clear, flatten, fmtNum, paramsText } from "./dom.js";
import { statusBadge } from "./views.js";

const PAGE = 25;
const FIXED = [
  // [key, label, value of a trial]
  ["id", "id", (t) => t.id],
  ["number", "#", (t) => t.number],
  ["status", "status", (t) => t.status],
  ["metric", null, (t) => t.metric],
  ["best", "best", (t) => t.best_metric],
  ["steps", "steps", (t) => t.steps ?? 0],
  ["device_s", "device s", (t) => t.device_seconds],
  ["retries", "retries", (t) => t.retries ?? 0],
];
const WHY = ["reason", "why it ended", (t) => whyEnded(t)];

/** A failed trial's error; a killed trial's verdict; what stopped a stopped one. */
export function whyEnded(t) {
  return String((t.status === "failed" ? t.error : t.reason || t.error) ?? "");
}

function isNumber(v) {
  return typeof v === "number" && Number.isFinite(v);
}

/** Compare two cell values: numbers as numbers, text as text (numbers inside it too). */
function compareValues(a, b) {
  if (isNumber(a) && isNumber(b)) return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

const flatParams = new WeakMap(); // trial -> its flattened params (a trial object is never changed: events replace it)

function flatOf(t) {
  let flat = flatParams.get(t);
  if (!flat) {
    flat = flatten(t.params || {});
    flatParams.set(t, flat);
  }
  return flat;
}

/** Columns: the fixed ones, one per parameter (`param:<dotted name>`), then why it ended. */
export function columnsFor(trials, metricName) {
  const names = new Set();
  for (const t of trials) for (const k of Object.keys(flatOf(t))) names.add(k);
  const params = [...names].sort().map((n) => [`param:${n}`, n, (t) => flatOf(t)[n], n]);
  const fixed = FIXED.map(([k, label, get]) => [k, label ?? `${metricName || "metric"} (last)`, get]);
  return [...fixed, ...params, WHY];
}

/**
 * Sorted copy of `trials`: `sort` is a column key, "-" first for descending. Trials without a value
 * come last either way (as the API's metric sort); ties by id.
 */
export function sortTrials(trials, columns, sort) {
  const desc = sort.startsWith("-");
  const key = desc ? sort.slice(1) : sort;
  const col = columns.find((c) => c[0] === key) || columns[0];
  const get = col[2];
  const missing = (v) => v === undefined || v === null || v === "";
  return [...trials].sort((p, q) => {
    const a = get(p);
    const b = get(q);
    if (missing(a) || missing(b)) return missing(a) - missing(b) || p.id - q.id;
    const c = compareValues(a, b);
    return (desc ? -c : c) || p.id - q.id;
  });
}

const OPS = ["<=", ">=", "!=", "<", ">", "="];

/**
 * A filter's text as a predicate over trials, or {error} naming the term it cannot use. `columns` as
 * from `columnsFor`; a column is named by its key, its label or a parameter's dotted name; `metric`
 * and the metric's own name name the objective.
 */
export function parseFilter(text, columns, metricName) {
  const byName = new Map();
  const add = (n, get) => {
    if (!byName.has(n.toLowerCase())) byName.set(n.toLowerCase(), get); // a fixed column before a parameter of its name
  };
  for (const [key, label, get, param] of columns) {
    add(key, get);
    add(String(label), get);
    if (param) add(param, get);
  }
  if (metricName) add(metricName, byName.get("metric"));
  const tests = [];
  for (const term of String(text || "").trim().split(/\s+/).filter(Boolean)) {
    const m = /^([^<>=!]+)(<=|>=|!=|<|>|=)(.*)$/.exec(term);
    if (!m) {
      const word = term.toLowerCase();
      tests.push((t) => `${t.id} ${t.status} ${paramsText(t.params)} ${whyEnded(t)}`.toLowerCase().includes(word));
      continue;
    }
    const [, name, op, raw] = m;
    const get = byName.get(name.toLowerCase());
    if (!get) return { error: `no column named '${name}' (columns: ${columns.map((c) => c[3] || c[0]).join(", ")})` };
    if (raw === "") return { error: `'${term}': a value must follow ${op}` };
    const num = Number(raw);
    const numeric = raw.trim() !== "" && Number.isFinite(num);
    if (!numeric && op !== "=" && op !== "!=") return { error: `'${term}': ${op} needs a number` };
    tests.push((t) => {
      const v = get(t);
      if (v === undefined || v === null) return op === "!=";
      if (op === "=" || op === "!=") {
        const same = numeric && isNumber(v) ? v === num : String(v).toLowerCase() === raw.toLowerCase();
        return op === "=" ? same : !same;
      }
      if (!isNumber(v)) return false;
      return { "<": v < num, "<=": v <= num, ">": v > num, ">=": v >= num }[op];
    });
  }
  return { test: (t) => tests.every((f) => f(t)) };
}

export class TrialTable {
  constructor() {
    this.sort = "-id";
    this.offset = 0;
    this.status = "";
    this.filterText = "";
    this.trials = [];
    this.ctx = { metric: {}, bestId: null };
    this.head = h("tr");
    this.body = h("tbody");
    this.pager = h("div", { class: "pager" });
    this.count = h("span", { class: "muted", id: "trial-count" });
    this.error = h("span", { class: "filter-error", id: "trial-filter-error" });
    this.statusSel = h("select", { id: "trial-status", title: "only trials in this state" });
    this.filterBox = h("input", {
      type: "search",
      id: "trial-filter",
      placeholder: "filter: lr<0.01 status=completed adam",
      title: "terms separated by spaces, all must hold: column<value (<=, >, >=, =, !=) on a column or a parameter, or a word to find",
      autocomplete: "off",
    });
    this.statusSel.addEventListener("change", () => {
      this.status = this.statusSel.value;
      this.offset = 0;
      this.render();
    });
    this.filterBox.addEventListener("input", () => {
      this.filterText = this.filterBox.value;
      this.offset = 0;
      this.render();
    });
    this.el = h(
      "div",
      { class: "trial-table" },
      h("div", { class: "table-tools" }, this.statusSel, this.filterBox, this.count, this.error),
      h("div", { class: "table-scroll" }, h("table", { class: "trials", id: "trials" }, h("thead", {}, this.head), this.body)),
      this.pager,
    );
  }

  /**
   * New trials (every trial of the search the page holds) and what marks them: ctx {metric, bestId,
   * total: how many the search has, when the page holds fewer}.
   */
  update(trials, ctx) {
    this.trials = trials;
    this.ctx = ctx;
    this.render();
  }

  /** Show the page holding trial `tid` (under the current sort and filter) and mark its row. */
  highlight(tid) {
    const idx = this.rows().findIndex((t) => t.id === Number(tid));
    if (idx < 0) return;
    this.offset = Math.floor(idx / PAGE) * PAGE;
    this.render();
    const row = this.body.querySelector(`tr[data-trial-id="${Number(tid)}"]`);
    if (row) {
      row.classList.add("picked");
      row.scrollIntoView({ block: "nearest", behavior: "smooth" });
    }
  }

  rows() {
    const cols = this.columns();
    const filter = parseFilter(this.filterText, cols, this.ctx.metric?.name);
    this.filterError = filter.error || "";
    const kept = this.trials.filter((t) => (!this.status || t.status === this.status) && (filter.test ? filter.test(t) : false));
    return sortTrials(kept, cols, this.sort);
  }

  columns() {
    return columnsFor(this.trials, this.ctx.metric?.name);
  }

  renderStatus() {
    const counts = new Map();
    for (const t of this.trials) counts.set(t.status, (counts.get(t.status) || 0) + 1);
    if (this.status && !counts.has(this.status)) counts.set(this.status, 0);
    const options = [["", `every status (${this.trials.length})`], ...[...counts].sort().map(([st, n]) => [st, `${st} (${n})`])];
    const key = JSON.stringify(options);
    if (key === this.statusKey) return; // unchanged: an open drop-down stays open
    this.statusKey = key;
    clear(this.statusSel);
    for (const [value, label] of options) this.statusSel.appendChild(h("option", { value }, label));
    this.statusSel.value = this.status;
  }

  render() {
    const cols = this.columns();
    const rows = this.rows();
    const { bestId } = this.ctx;
    this.renderStatus();
    this.error.textContent = this.filterError;
    this.filterBox.classList.toggle("bad", Boolean(this.filterError));
    if (this.offset >= rows.length) this.offset = Math.max(0, Math.floor((rows.length - 1) / PAGE) * PAGE);

    clear(this.head);
    const [sortKey, desc] = this.sort.startsWith("-") ? [this.sort.slice(1), true] : [this.sort, false];
    for (const [key, label] of cols) {
      const active = sortKey === key;
      const th = h(
        "th",
        { class: `sortable${active ? " active" : ""}${key.startsWith("param:") ? " param" : ""}`, "data-sort": key, title: `sort by ${label}` },
        label,
        active ? (desc ? " ▼" : " ▲") : "",
      );
      th.addEventListener("click", () => {
        this.sort = active && desc ? key : `-${key}`;
        this.offset = 0;
        this.render();
      });
      this.head.appendChild(th);
    }

    clear(this.body);
    const page = rows.slice(this.offset, this.offset + PAGE);
    if (!page.length) {
      const msg = this.trials.length ? "No trial matches." : "No trials yet.";
      this.body.appendChild(h("tr", {}, h("td", { colspan: cols.length, class: "empty" }, msg)));
    }
    for (const t of page) {
      const best = t.id === bestId;
      const cells = cols.map(([key, , get]) => {
        const v = get(t);
        if (key === "id") return h("td", { class: "num" }, h("a", { href: `#/trial/${Number(t.id)}`, class: "trial-link", title: "open this trial's page" }, String(t.id)));
        if (key === "status") return h("td", {}, statusBadge(t.status), best ? h("span", { class: "best-tag" }, " best") : "");
        if (key === "reason") return h("td", { class: "err", title: v }, v.length > 80 ? `${v.slice(0, 79)}…` : v);
        if (key.startsWith("param:")) return h("td", { class: `param${isNumber(v) ? " num" : ""}`, "data-param": key.slice(6) }, v === undefined || v === null ? "—" : isNumber(v) ? fmtNum(v) : String(v));
        return h("td", { class: "num" }, key === "device_s" ? fmtNum(v, 3) : fmtNum(v));
      });
      this.body.appendChild(
        h("tr", { "data-trial-id": t.id, class: `trial st-row-${String(t.status).replace(/[^a-z]/g, "")}${best ? " best" : ""}` }, ...cells),
      );
    }

    const total = this.trials.length;
    const shown = page.length ? `${this.offset + 1}–${this.offset + page.length} of ` : "";
    const more = this.ctx.total > total ? ` (the first ${total} of ${this.ctx.total})` : "";
    this.count.textContent = (rows.length === total ? `${shown}${total} trials` : `${shown}${rows.length} matching, ${total} trials`) + more;
    clear(this.pager);
    const pages = Math.max(1, Math.ceil(rows.length / PAGE));
    const pageNo = Math.floor(this.offset / PAGE) + 1;
    const go = (offset) => () => {
      this.offset = offset;
      this.render();
    };
    this.pager.appendChild(h("button", { disabled: this.offset === 0, onclick: go(Math.max(0, this.offset - PAGE)) }, "‹ prev"));
    this.pager.appendChild(h("span", { class: "muted" }, ` page ${pageNo} of ${pages} `));
    this.pager.appendChild(h("button", { disabled: this.offset + PAGE >= rows.length, onclick: go(this.offset + PAGE) }, "next ›"));
  }
}
