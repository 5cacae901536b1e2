// The searches list (#/, or #/tag/<tag>: those with that tag): every search the caller may see with its
// tags and notes, an admin's per-user filter, a tag filter, a choice of searches to compare
// (#/compare/<id>,<id>...), and the users' shares of device time.

import { api } from "./api.js";
import { h, replace, clear, fmtNum, fmtDuration, fmtTime, paramsText } from "./dom.js";
import { ACTIVE, goalArrow, onRefreshError, progressBar, refresher, showError, statusBadge } from "./views.js";

let ownerFilter = ""; // an admin's per-user view: "" = every user's searches
const picked = new Set(); // searches ticked for comparison (kept while the page lives)

/** The searches with `tag`, as an address (every search for ""). */
export function tagHash(tag) {
  return tag ? `#/tag/${encodeURIComponent(tag)}` : "#/";
}

/** A search's tags as chips, each a link to the searches with it. */
export function tagChips(tags) {
  return (tags || []).map((t) => h("a", { class: "chip tag", href: tagHash(t), "data-tag": t, title: `searches tagged ${t}` }, t));
}

/** me: the signed-in user ({name, role}) or null; tag: only the searches with this tag ("" for all). */
export function listView(root, me, tag = "") {
  const admin = me && me.role === "admin";
  const body = h("tbody");
  const count = h("span", { class: "muted" });
  const compareBtn = h("button", { id: "compare-btn", class: "compare-btn", disabled: true, title: "tick two or more searches" }, "Compare");
  const syncCompare = () => {
    compareBtn.disabled = picked.size < 2;
    compareBtn.textContent = picked.size ? `Compare ${picked.size}` : "Compare";
  };
  compareBtn.addEventListener("click", () => {
    if (picked.size >= 2) window.location.hash = `#/compare/${[...picked].sort((a, b) => a - b).join(",")}`;
  });
  syncCompare();
  const table = h(
    "table",
    { class: "searches", id: "searches" },
    h("thead", {}, h("tr", {}, h("th", { title: "compare" }, ""), ...["id", "name", "tags", "owner", "status", "best", "progress", "target", "created", "time"].map((c) => h("th", {}, c)))),
    body,
  );
  // Admins see every user's searches and may narrow the list to one user's.
  const filter = h("select", { class: "owner-filter", id: "owner-filter", title: "whose searches", hidden: "" }, h("option", { value: "" }, "all users"));
  filter.addEventListener("change", () => {
    ownerFilter = filter.value;
    refresh().catch((e) => showError(root, e));
  });
  // Only the searches with one tag: the address says which (#/tag/<tag>), so it can be shared.
  const tagBox = h("input", { type: "search", id: "tag-filter", class: "tag-filter", placeholder: "tag", title: "only the searches with this tag", value: tag, maxlength: 40 });
  tagBox.addEventListener("change", () => {
    window.location.hash = tagHash(tagBox.value.trim());
  });
  if (admin) {
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
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Searches"), filter, tagBox, count, h("span", { class: "spacer" }), compareBtn), table),
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h3", {}, admin ? "Users' shares" : "Your share"), sharesHint), sharesTable),
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

  function pickBox(sid) {
    const box = h("input", { type: "checkbox", class: "pick", "data-search-id": sid, title: "compare this search" });
    box.checked = picked.has(sid);
    box.addEventListener("change", () => {
      if (box.checked) picked.add(sid);
      else picked.delete(sid);
      syncCompare();
    });
    return box;
  }

  async function refresh() {
    const owner = admin && ownerFilter ? `&owner=${encodeURIComponent(ownerFilter)}` : "";
    const tagged = tag ? `&tag=${encodeURIComponent(tag)}` : "";
    const data = await api(`/searches?limit=200${owner}${tagged}`);
    const items = data.items || [];
    count.textContent = `${data.total ?? items.length} total${tag ? ` tagged ${tag}` : ""}`;
    clear(body);
    if (!items.length) {
      const none = tag ? `No search is tagged ${tag}.` : "No searches yet. Post a spec to /api/v1/searches or run `quanta submit`.";
      body.appendChild(h("tr", {}, h("td", { colspan: 11, class: "empty" }, none)));
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
          h("td", {}, pickBox(Number(sr.id))),
          h("td", { class: "num" }, String(sr.id)),
          h("td", { class: "name" }, link, sr.notes ? h("span", { class: "notes-mark muted", title: sr.notes }, " ✎") : ""),
          h("td", { class: "tags" }, ...tagChips(sr.tags)),
          h("td", { class: "owner" }, sr.owner || ""),
          h("td", { title: sr.waiting || "" }, statusBadge(sr.status), sr.waiting ? h("span", { class: "waiting muted" }, ` ${sr.waiting}`) : "", sr.reached ? h("span", { class: "reached", title: "target reached" }, " ✓") : ""),
          h("td", { class: "num", title: sr.best ? paramsText(sr.best.params) : "" }, sr.best ? `${m.name || "metric"} ${goalArrow(m)} ${fmtNum(sr.best.metric)}` : "—"),
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
