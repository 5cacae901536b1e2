// Talking to the Quanta REST API: the token (asked once, kept in localStorage), JSON requests with
// the bearer header, and the server-sent event stream.

const KEY = "quanta.token";
export const API = "/api/v1";

export class AuthError extends Error {}

export function getToken() {
  try {
    return localStorage.getItem(KEY);
  } catch {
    return null;
  }
}

export function setToken(token) {
  localStorage.setItem(KEY, token);
}

export function clearToken() {
  localStorage.removeItem(KEY);
}

/** Take `?token=...` from the URL into localStorage and drop it from the address bar. */
export function adoptTokenFromUrl() {
  const url = new URL(window.location.href);
  const token = url.searchParams.get("token");
  if (!token) return false;
  setToken(token);
  url.searchParams.delete("token");
  history.replaceState(null, "", url.pathname + url.search + url.hash);
  return true;
}

/** A request to the API; the answer's JSON (its text with `text: true`), or an error with its `status`. */
export async function api(path, { method = "GET", body, text = false } = {}) {
  const headers = { Authorization: `Bearer ${getToken() || ""}`, Accept: text ? "text/plain" : "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(API + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (resp.status === 401 || resp.status === 403) {
    let detail = "";
    try {
      detail = (await resp.json()).detail || "";
    } catch {}
    if (resp.status === 401) throw new AuthError(typeof detail === "string" ? detail : "unauthorized");
    throw new Error(typeof detail === "string" && detail ? detail : `forbidden: ${path}`);
  }
  if (!resp.ok) {
    let detail = resp.statusText;
    try {
      const j = await resp.json();
      detail = typeof j.detail === "string" ? j.detail : JSON.stringify(j.detail ?? j);
    } catch {}
    const err = new Error(`${method} ${path}: ${resp.status} ${detail}`);
    err.status = resp.status;
    throw err;
  }
  if (resp.status === 204) return null;
  return text ? resp.text() : resp.json();
}

/** Check a token against the API without storing it. */
export async function checkToken(token) {
  const resp = await fetch(`${API}/searches?limit=1`, { headers: { Authorization: `Bearer ${token}` } });
  return resp.ok;
}

/**
 * Subscribe to /events. `onEvent(kind, data)` gets "search", "trial" and "report" events;
 * `onState(state)` gets "live", "connecting" or "down". Returns a close function.
 */
export function subscribe(onEvent, onState) {
  let es = null;
  let closed = false;
  let retry = null;
  const open = () => {
    if (closed) return;
    onState("connecting");
    es = new EventSource(`${API}/events?token=${encodeURIComponent(getToken() || "")}`);
    es.onopen = () => onState("live");
    es.onerror = () => {
      // EventSource reconnects by itself unless the server answered with an error status.
      if (es.readyState === EventSource.CLOSED) {
        onState("down");
        es = null;
        clearTimeout(retry);
        retry = setTimeout(open, 5000);
      } else onState("connecting");
    };
    for (const kind of ["search", "trial", "report"]) {
      es.addEventListener(kind, (ev) => {
        let data = null;
        try {
          data = JSON.parse(ev.data);
        } catch {
          data = null;
        }
        onEvent(kind, data);
      });
    }
    es.onmessage = (ev) => {
      // Unnamed events: refresh whatever is shown.
      let data = null;
      try {
        data = JSON.parse(ev.data);
      } catch {}
      onEvent("message", data);
    };
  };
  open();
  return () => {
    closed = true;
    clearTimeout(retry);
    if (es) es.close();
  };
}
