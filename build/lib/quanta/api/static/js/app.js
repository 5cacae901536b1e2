// Quanta dashboard: the token form, the routes (#/ searches, #/tag/<tag> the searches with a tag,
// #/search/<id>, #/trial/<id>, #/compare/<id>,<id>...), and live updates through /events for whichever
// view is shown.

import { AuthError, adoptTokenFromUrl, api, checkToken, clearToken, getToken, setToken, subscribe } from "./api.js";
import { h, replace } from "./dom.js";
import { compareIds, compareView } from "./compare.js";
import { listView } from "./list.js";
import { searchView } from "./search.js";
import { trialView } from "./trial.js";
import { setAuthHandler } from "./views.js";

const root = document.getElementById("app");
const connEl = document.getElementById("conn");
const logoutEl = document.getElementById("logout");
const whoamiEl = document.getElementById("whoami");
let me = null; // the signed-in user: {name, role, ...} from /me

let view = null; // the current view: {dispose(), onEvent(kind, data), poll()}
let unsubscribe = null;
let connState = "down";

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

// ---------------------------------------------------------------- routing and live updates

function setConn(state) {
  connState = state;
  connEl.textContent = { live: "● live", connecting: "○ connecting…", down: "○ offline (polling)" }[state] || state;
  connEl.className = `conn conn-${state}`;
}

function route() {
  if (!getToken()) return needToken();
  if (view) view.dispose();
  const hash = window.location.hash;
  let m;
  if ((m = /^#\/search\/(\d+)/.exec(hash))) view = searchView(root, Number(m[1]), me);
  else if ((m = /^#\/trial\/(\d+)/.exec(hash))) view = trialView(root, Number(m[1]));
  else if ((m = /^#\/compare\/([\d,]+)/.exec(hash))) view = compareView(root, compareIds(m[1]));
  else if ((m = /^#\/tag\/([^/?#]+)/.exec(hash))) view = listView(root, me, decoded(m[1]));
  else view = listView(root, me, "");
}

/** A part of the address decoded ("" when it is not valid percent-encoding). */
function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return "";
  }
}

/** `/?search=3` (a link written before the dashboard routed on `#/search/3`) opens that search. */
function adoptSearchFromUrl() {
  const url = new URL(window.location.href);
  const id = url.searchParams.get("search");
  if (id === null) return;
  url.searchParams.delete("search");
  const hash = /^\d+$/.test(id) ? `#/search/${id}` : url.hash;
  history.replaceState(null, "", url.pathname + url.search + hash);
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

window.addEventListener("hashchange", () => {
  if (!getToken()) return;
  route();
  window.scrollTo(0, 0); // a new page starts at its top
});
logoutEl.addEventListener("click", () => needToken("Signed out."));
// Poll as a fallback while the event stream is down, and slowly anyway (running bars grow with time).
let tick = 0;
setInterval(() => {
  tick++;
  if (!view || !getToken()) return;
  if (connState !== "live" || tick % 6 === 0) view.poll();
}, 5000);

setAuthHandler(needToken);
adoptTokenFromUrl();
adoptSearchFromUrl();
if (getToken()) start();
else needToken();
