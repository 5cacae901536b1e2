"""`Client`: the REST client of a Quanta server (httpx).

from quanta.sdk import Client

client = Client("http://127.0.0.1:8000", token)       # token: argument or QUANTA_TOKEN
search = client.submit("examples/digits.yaml")       # a path, YAML/JSON text, or a dict
search.wait(timeout=600)                             # a progress bar in a terminal or Jupyter
print(search.status, search.reached, search.best())
search.trials()                                      # a pandas DataFrame (the notebook extra)
search.pareto()                                      # the Pareto front: one row per point (a DataFrame)
search.plot()                                        # best-so-far over time (matplotlib)
client.fork(17, {"lr": 0.001}, steps=2000)           # a new trial from trial 17's state (mutable values)
search.lineage()                                     # every trial's parent, fork step and config changes
search.resume(trials=20, seconds=600)                # go on (stopped, completed, paused), with more budget
search.tag("baseline"); search.update(notes="...")   # tags and notes; client.searches(tag="baseline")
search.delete()
for event in client.events(search_id=search.id):     # server-sent events, parsed
    print(event.event, event.data)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from quanta.sdk.notebook import (
    ProgressKind,
    make_bar,
    pareto_frame,
    plot_best,
    progress_kind,
    progress_text,
    trials_frame,
)
from quanta.status import SEARCH_FINAL, SearchStatus

NO_PANDAS = (
    "Search.trials() returns a pandas DataFrame: pip install 'quanta[notebook]' (or pandas), "
    "or ask for the list of dicts with trials(frame=False)"
)
NO_PANDAS_PARETO = (
    "Search.pareto() returns a pandas DataFrame: pip install 'quanta[notebook]' (or pandas), "
    "or ask for the server's answer as a dict with pareto(frame=False)"
)


class ApiError(Exception):
    """The server refused a request. `status_code` and `detail` are the server's answer."""

    def __init__(self, status_code: int, detail: Any, method: str = "", path: str = ""):
        self.status_code = status_code
        self.detail = detail
        if isinstance(detail, list):  # spec errors: [{"loc", "msg"}]
            text = "; ".join(f"{d.get('loc')}: {d.get('msg')}" if isinstance(d, dict) else str(d) for d in detail)
        else:
            text = str(detail)
        super().__init__(f"{method} {path} -> {status_code}: {text}".strip())


@dataclass(frozen=True)
class Event:
    """One server-sent event: `event` is search | trial | report; `data` the parsed JSON."""

    event: str
    data: Any
    id: str | None = None


class Search:
    """A search on the server. Attributes mirror the last fetched SearchOut (`refresh()` re-reads)."""

    def __init__(self, client: Client, data: dict[str, Any]):
        self._client = client
        self.data = data

    @property
    def id(self) -> int:
        return int(self.data["id"])

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def reached(self) -> bool:
        return bool(self.data.get("reached"))

    @property
    def tags(self) -> list[str]:
        return list(self.data.get("tags") or [])

    @property
    def notes(self) -> str | None:
        return self.data.get("notes")

    @property
    def done(self) -> bool:
        return self.status in SEARCH_FINAL

    @property
    def dashboard_url(self) -> str:
        """The search's page on the server's dashboard (it routes on the URL's fragment)."""
        return dashboard_url(self._client.url, self.id)

    def __repr__(self) -> str:
        return f"Search(id={self.id}, name={self.name!r}, status={self.status!r})"

    def refresh(self) -> Search:
        self.data = self._client._request("GET", f"/searches/{self.id}").json()
        return self

    def wait(
        self,
        timeout: float | None = None,
        poll_s: float = 1.0,
        *,
        progress: bool | ProgressKind | None = None,
    ) -> Search:
        """Block until the search is completed, stopped or failed. Raises `TimeoutError` after `timeout`.

        `progress` shows trials done / max trials with the best metric while waiting: None (default)
        draws tqdm's notebook bar in Jupyter, rich's bar in a terminal and nothing when output is a file
        or a pipe; True draws one anyway; False never; "terminal" / "notebook" pick the kind."""
        kind = progress_kind(progress)
        bar = make_bar(kind, f"search {self.id} {self.name}") if kind is not None else None
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                self.refresh()
                if bar is not None:
                    p = self.data.get("progress") or {}
                    bar.update(int(p.get("trials_done") or 0), p.get("max_trials"), progress_text(self.data))
                if self.done:
                    return self
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"search {self.id} still {self.status} after {timeout} s")
                time.sleep(poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic())))
        finally:
            if bar is not None:
                bar.close()

    def best(self) -> dict[str, Any] | None:
        """{"trial_id", "metric", "params"} of the best trial so far, or None."""
        return self.refresh().data.get("best")

    def trials(self, status: str | None = None, sort: str = "id", page: int = 500, *, frame: bool = True) -> Any:
        """All trials, fetched page by page: a pandas DataFrame (one row per trial, parameters flattened
        to `params.<name>` columns), or with `frame=False` a list of TrialOut dicts. The DataFrame needs
        pandas (the `notebook` extra): without it this raises ImportError saying so before fetching
        anything, rather than quietly returning another type."""
        if frame is not False and not _has_pandas():
            raise ImportError(NO_PANDAS)
        out: list[dict[str, Any]] = []
        while True:
            params: dict[str, Any] = {"offset": len(out), "limit": page, "sort": sort}
            if status:
                params["status"] = status
            body = self._client._request("GET", f"/searches/{self.id}/trials", params=params).json()
            out.extend(body["items"])
            if not body["items"] or len(out) >= body["total"]:
                break
        return trials_frame(out) if frame is not False else out

    def pareto(self, *, frame: bool = True) -> Any:
        """The search's Pareto front, read from its stored reports (running or ended): a pandas DataFrame
        with one row per front point (`trial_id`, `number`, `step`, `seconds` since the search started,
        `status`, one column per objective in the user's units, the trial's parameters as `params.<name>`
        columns), best in the first objective first. A single-objective search's front is its best point.
        With `frame=False`, the server's whole answer as a dict (`GET /searches/{id}/pareto`: also every
        point's kind, the counts, the reference point and the hypervolume over time). The DataFrame needs
        pandas (the `notebook` extra): ImportError saying so otherwise, before fetching anything."""
        if frame is not False and not _has_pandas():
            raise ImportError(NO_PANDAS_PARETO)
        params = {"max_points": 0} if frame is not False else None
        body = self._client._request("GET", f"/searches/{self.id}/pareto", params=params).json()
        return pareto_frame(body) if frame is not False else body

    def best_curve(self) -> list[tuple[float, float]]:
        """[(seconds since the search started, best metric so far), ...], one point per improvement."""
        points = self._client._request("GET", f"/searches/{self.id}/best").json()["points"]
        return [(float(t), float(v)) for t, v in points]

    def plot(self, ax: Any = None) -> Any:
        """Plot the best metric so far against time (matplotlib; in Jupyter the figure shows inline).
        Returns the Axes; `ax` draws on an existing one."""
        self.refresh()
        return plot_best(self.best_curve(), self.data.get("metric") or {}, f"search {self.id}: {self.name}", ax)

    def curves(self) -> dict[str, Any]:
        return self._client._request("GET", f"/searches/{self.id}/curves").json()

    def export(self, format: str = "csv") -> bytes:
        """Every trial as one file's bytes, `format` csv, json or parquet: one row per trial with its
        parameters flattened into `params.*` columns (see `quanta.db.export`)."""
        return self._client._request("GET", f"/searches/{self.id}/trials", params={"format": format}).content

    def lineage(self) -> dict[str, Any]:
        """Every trial with its parent (`parent_id`, None for the searcher's own) and the parent's step it
        started from (`fork_step`), each change of its mutable parameters (`changes`), the search's
        mutable parameters and its fork requests (`GET /searches/{id}/lineage`)."""
        return self._client._request("GET", f"/searches/{self.id}/lineage").json()

    def fork(
        self, trial_id: int, values: Mapping[str, Any] | None = None, steps: int | None = None, **kw: Any
    ) -> dict[str, Any]:
        """`Client.fork` of one of this search's trials."""
        return self._client.fork(trial_id, values, steps, **kw)

    def _command(self, command: str) -> Search:
        self.data = self._client._request("POST", f"/searches/{self.id}/{command}").json()
        return self

    def stop(self) -> Search:
        return self._command("stop")

    def pause(self, *, wait: bool = True, timeout: float = 30.0, poll_s: float = 0.2) -> Search:
        """Park the search's trials and start no new ones until `resume()`. The server's controller carries
        the command out at its next tick, so the server's answer still shows the search running: with
        `wait` (the default) this polls until the search is `paused` (or ended meanwhile) and returns it
        in that state; `TimeoutError` after `timeout` seconds (no controller is running on its database).
        `wait=False` returns at once, the search as the server answered (still `running`)."""
        self._command("pause")
        if not wait:
            return self
        deadline = time.monotonic() + timeout
        while self.status != SearchStatus.PAUSED and not self.done:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"search {self.id} still {self.status} {timeout} s after it was asked to pause "
                    "(is a controller running on the server's database?)"
                )
            time.sleep(poll_s)
            self.refresh()
        return self

    def resume(self, trials: int = 0, seconds: float = 0.0) -> Search:
        """Resume a paused, stopped or completed search, its budget raised by `trials` and `seconds` (a
        running one takes the raised budget only): its searcher goes on from every trial so far, and the
        trials its end stopped go on from their checkpoints. `ApiError` 409 when it cannot (queued,
        failed, or its budget spent and none added), 422 naming a budget out of bounds."""
        body = {"max_trials": trials, "max_seconds": seconds} if trials or seconds else None
        self.data = self._client._request("POST", f"/searches/{self.id}/resume", json=body).json()
        return self

    def extend(self, trials: int = 0, seconds: float = 0.0) -> Search:
        """More trials or time for the search (`resume` with a raised budget)."""
        return self.resume(trials=trials, seconds=seconds)

    def update(self, *, tags: list[str] | None = None, notes: str | None = None) -> Search:
        """Set its tags (the whole list; [] removes them) and notes ("" removes them); None leaves one as
        it is. `ApiError` 422 names a value out of bounds."""
        body: dict[str, Any] = {}
        if tags is not None:
            body["tags"] = list(tags)
        if notes is not None:
            body["notes"] = notes
        self.data = self._client._request("PATCH", f"/searches/{self.id}", json=body).json()
        return self

    def tag(self, *tags: str) -> Search:
        """Add `tags` to the search's."""
        return self.update(tags=list(dict.fromkeys([*self.refresh().tags, *tags])))

    def untag(self, *tags: str) -> Search:
        """Remove `tags` from the search's."""
        return self.update(tags=[t for t in self.refresh().tags if t not in tags])

    def delete(self) -> bool:
        """Delete the search with everything recorded about it (its running trials are stopped first).
        True once deleted; False when its trials were still stopping (the server deletes it then)."""
        return self._client._request("DELETE", f"/searches/{self.id}").status_code == 204


class Client:
    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ):
        token = token or os.environ.get("QUANTA_TOKEN")
        if not token:
            raise ValueError("no token: pass Client(url, token) or set QUANTA_TOKEN")
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        r = self._http.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except (ValueError, AttributeError):
                detail = r.text
            raise ApiError(r.status_code, detail, method, path)
        return r

    # ---- searches ----------------------------------------------------------------------------

    def submit(self, spec: dict[str, Any] | str | Path) -> Search:
        """Post a spec: a dict, a path to a .yaml/.yml/.json file, or YAML/JSON text."""
        if isinstance(spec, dict):
            r = self._request("POST", "/searches", json=spec)
            return Search(self, r.json())
        if isinstance(spec, Path) or (isinstance(spec, str) and "\n" not in spec and _looks_like_file(spec)):
            path = Path(spec)
            text = path.read_text()
            media = "application/json" if path.suffix == ".json" else "application/yaml"
        else:
            text, media = str(spec), "application/yaml"
        r = self._request("POST", "/searches", content=text.encode(), headers={"Content-Type": media})
        return Search(self, r.json())

    def search(self, search_id: int) -> Search:
        return Search(self, self._request("GET", f"/searches/{search_id}").json())

    def searches(self, status: str | None = None, limit: int = 100, tag: str | None = None) -> list[Search]:
        """The newest searches the caller may see (`status`, `tag`: only those)."""
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        if tag:
            params["tag"] = tag
        return [Search(self, d) for d in self._request("GET", "/searches", params=params).json()["items"]]

    def trial(self, trial_id: int) -> dict[str, Any]:
        """A trial with its learning curve (`curve`) and quanta history (`quanta`)."""
        return self._request("GET", f"/trials/{trial_id}").json()

    def logs(self, trial_id: int, tail: int = 64 * 1024) -> str:
        """The trial's stdout and stderr as the server keeps them: the last `tail` bytes."""
        return self._request("GET", f"/trials/{trial_id}/logs", params={"tail": tail}).text

    def stop_trial(self, trial_id: int) -> dict[str, Any]:
        return self._request("POST", f"/trials/{trial_id}/stop").json()

    def fork(
        self,
        trial_id: int,
        values: Mapping[str, Any] | None = None,
        steps: int | None = None,
        *,
        wait: bool = True,
        timeout: float = 120.0,
        poll_s: float = 0.2,
    ) -> dict[str, Any]:
        """Start a new trial of trial `trial_id`'s search from its state (at its next mini-batch boundary
        if it runs, else its last checkpoint) with new `values` for mutable parameters and `steps` more
        mini-batches (None: up to the search's budget). Returns the fork request (`ForkOut`: `status`,
        `child_id`, `fork_step`, `error`); with `wait`, once the controller has carried it out (status
        "done", or "failed" with the reason), or `TimeoutError` after `timeout` seconds. `ApiError` for a
        request the server refuses (422: a parameter that is not mutable; 409: no state to fork)."""
        body: dict[str, Any] = {"set": dict(values or {})}
        if steps is not None:
            body["steps"] = steps
        out: dict[str, Any] = self._request("POST", f"/trials/{trial_id}/fork", json=body).json()
        deadline = time.monotonic() + timeout
        while wait and out["status"] in ("pending", "copying"):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"fork {out['id']} of trial {trial_id} still {out['status']} after {timeout} s")
            time.sleep(poll_s)
            out = self.fork_request(int(out["id"]))
        return out

    def fork_request(self, fork_id: int) -> dict[str, Any]:
        """A fork request as the controller carries it out (`GET /forks/{id}`)."""
        return self._request("GET", f"/forks/{fork_id}").json()

    def cluster(self) -> dict[str, Any]:
        return self._request("GET", "/cluster").json()

    # ---- events ------------------------------------------------------------------------------

    def events(self, search_id: int | None = None, max_seconds: float | None = None) -> Iterator[Event]:
        """Iterate server-sent events (`search`, `trial`, `report`) as they happen. Ends when the
        server ends the stream (after `max_seconds`, or when it shuts down); break out to stop early."""
        params: dict[str, Any] = {}
        if search_id is not None:
            params["search_id"] = search_id
        if max_seconds is not None:
            params["max_seconds"] = max_seconds
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        with self._http.stream("GET", "/events", params=params, timeout=timeout) as r:
            if r.status_code >= 400:
                r.read()
                raise ApiError(r.status_code, r.text, "GET", "/events")
            yield from parse_sse(r.iter_lines())


def _has_pandas() -> bool:
    """True when pandas can be imported (found, and not blocked from import)."""
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def dashboard_url(server: str, search_id: int) -> str:
    """The dashboard page of search `search_id` on the server at `server` (`http://host:port`)."""
    return f"{server.rstrip('/')}/#/search/{search_id}"


def _looks_like_file(text: str) -> bool:
    return text.endswith((".yaml", ".yml", ".json")) or os.path.isfile(text)


def parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    """Events from the lines of a text/event-stream (comments and retry fields skipped)."""
    name, ident = "message", None
    data: list[str] = []
    for line in lines:
        line = line.rstrip("\r")
        if not line:
            if data:
                raw = "\n".join(data)
                try:
                    payload: Any = json.loads(raw)
                except ValueError:
                    payload = raw
                yield Event(name, payload, ident)
            name, data, ident = "message", [], None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            ident = value
