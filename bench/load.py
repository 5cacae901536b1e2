"""The API under load: one `quanta serve` (SQLite, 2 CPU devices, loopback only) with one search running,
`--clients` clients calling the read routes back to back (each sends its next request when the last is
answered) and `--streams` open `/events` streams, for `--seconds`.

    python bench/load.py --seconds 30 --clients 50 --streams 20 --json bench/results/reliability/load.json

Goals (docs/reliability.md): at least 300 requests per second over the read routes, p99 at most 250 ms,
`/healthz` p99 at most 50 ms, zero 5xx, no transport failure, every stream open (200) and receiving
events, the search still running at the end. Prints a table (per route: requests, p50, p99, statuses)
and writes {"config", "load_average", "requests", "requests_per_s", "p50_ms", "p99_ms", "healthz_p99_ms",
"server_errors_5xx", "transport_failures", "streams", "per_route", "goals", ...}. The figures are the
machine's as much as the service's: run it on a quiet machine (the load average before and after the
run is recorded with them). The clients are one asyncio process over httpx, on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

GOALS = {"requests_per_s": 300.0, "p99_ms": 250.0, "healthz_p99_ms": 50.0}

# One small search that keeps running (its target is never reached) and reports often enough for the
# streams to carry events, while its trials leave the CPU mostly to the API (`bench.trainables:paced`).
SPEC: dict[str, Any] = {
    "name": "under-load",
    "trainable": "bench.trainables:paced",
    "space": {"lr": {"loguniform": [0.001, 0.1]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},
    "budget": {"max_trials": 1000, "max_steps": 100_000, "max_seconds": 3600},
    "parallelism": 4,
    "search": {"algorithm": "random"},
    "scheduler": {"policy": "timeslice", "quantum_s": 1.0},
    "config": {"sleep_s": 0.005, "report_every": 20},
}


@dataclass(frozen=True)
class Route:
    """A request the clients pick from: its label in the figures, method, path and JSON body."""

    label: str
    method: str
    path: str
    body: dict[str, Any] | None = None


def read_routes(search_id: int, trial_id: int) -> list[Route]:
    """The read routes a dashboard and the SDK call, `/metrics` and `/healthz`."""
    v1 = "/api/v1"
    return [
        Route("GET /searches", "GET", f"{v1}/searches"),
        Route("GET /searches/{id}", "GET", f"{v1}/searches/{search_id}"),
        Route("GET /searches/{id}/trials", "GET", f"{v1}/searches/{search_id}/trials"),
        Route("GET /searches/{id}/curves", "GET", f"{v1}/searches/{search_id}/curves"),
        Route("GET /searches/{id}/timeline", "GET", f"{v1}/searches/{search_id}/timeline"),
        Route("GET /searches/{id}/best", "GET", f"{v1}/searches/{search_id}/best"),
        Route("GET /trials/{id}", "GET", f"{v1}/trials/{trial_id}"),
        Route("GET /cluster", "GET", f"{v1}/cluster"),
        Route("GET /metrics", "GET", "/metrics"),
        Route("GET /healthz", "GET", "/healthz"),
    ]


def _percentiles(seconds: Sequence[float]) -> tuple[float | None, float | None]:
    if not seconds:
        return None, None
    ms = np.array(seconds) * 1000
    return round(float(np.percentile(ms, 50)), 1), round(float(np.percentile(ms, 99)), 1)


async def run_load(
    url: str,
    token: str,
    routes: Sequence[Route],
    seconds: float,
    clients: int,
    streams: int,
    search_id: int,
    seed: int = 0,
) -> dict[str, Any]:
    """`clients` closed-loop clients over `routes` (picked at random, seeded) and `streams` event streams
    of search `search_id`, for `seconds`. Returns the figures (see the module docstring)."""
    timings: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    failures: list[str] = []
    stream_events: list[int] = []
    stream_status: list[int] = []
    # Idle connections are dropped before the server's keep-alive timeout (uvicorn: 5 s) could close one
    # under a request being sent on it, as browsers do (a reset there is a client-side race, not a fault).
    limits = httpx.Limits(
        max_connections=clients + streams + 10, max_keepalive_connections=clients + streams, keepalive_expiry=2.0
    )
    headers = {"Authorization": f"Bearer {token}"}
    started = time.monotonic()
    end = started + seconds

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as client:

        async def one_client(n: int) -> None:
            rng = random.Random(seed * 1000 + n)
            while time.monotonic() < end:
                route = rng.choice(routes)
                t0 = time.perf_counter()
                try:
                    r = await client.request(route.method, route.path, json=route.body)
                    await r.aread()
                except httpx.HTTPError as exc:
                    failures.append(f"{route.label}: {type(exc).__name__} {exc}")
                    continue
                timings[route.label].append(time.perf_counter() - t0)
                statuses[route.label][r.status_code] += 1

        async def one_stream() -> None:
            events = 0
            try:
                params = {"search_id": search_id, "max_seconds": seconds + 2}
                async with client.stream("GET", "/api/v1/events", params=params) as r:
                    stream_status.append(r.status_code)
                    async for line in r.aiter_lines():
                        if line.startswith("event:"):
                            events += 1
                        if time.monotonic() >= end:
                            break
            except httpx.HTTPError as exc:
                failures.append(f"event stream: {type(exc).__name__} {exc}")
            stream_events.append(events)

        await asyncio.gather(*(one_client(i) for i in range(clients)), *(one_stream() for _ in range(streams)))
    elapsed = time.monotonic() - started

    per_route = {}
    for label, ts in sorted(timings.items()):
        p50, p99 = _percentiles(ts)
        per_route[label] = {"requests": len(ts), "p50_ms": p50, "p99_ms": p99, "statuses": dict(statuses[label])}
    reads = [t for r in routes if r.method == "GET" for t in timings.get(r.label, [])]
    p50, p99 = _percentiles(reads)
    total = sum(len(t) for t in timings.values())
    return {
        "seconds": round(elapsed, 1),
        "clients": clients,
        "requests": total,
        "requests_per_s": round(total / elapsed, 1),
        "read_requests_per_s": round(len(reads) / elapsed, 1),
        "p50_ms": p50,
        "p99_ms": p99,
        "healthz_p99_ms": per_route.get("GET /healthz", {}).get("p99_ms"),
        "server_errors_5xx": sum(n for s in statuses.values() for code, n in s.items() if code >= 500),
        "transport_failures": len(failures),
        "failures_sample": failures[:5],
        "streams": {
            "opened": streams,
            "statuses": sorted(set(stream_status)),
            "events_min": min(stream_events) if stream_events else 0,
            "events_total": sum(stream_events),
        },
        "per_route": per_route,
    }


def goals_met(figures: dict[str, Any]) -> dict[str, bool]:
    """Each goal of the module docstring, met or not."""
    streams = figures["streams"]

    def at_most(value: float | None, bound: float) -> bool:
        return value is not None and value <= bound

    return {
        "read_requests_per_s >= 300": figures["read_requests_per_s"] >= GOALS["requests_per_s"],
        "p99 <= 250 ms": at_most(figures["p99_ms"], GOALS["p99_ms"]),
        "healthz p99 <= 50 ms": at_most(figures["healthz_p99_ms"], GOALS["healthz_p99_ms"]),
        "zero 5xx": figures["server_errors_5xx"] == 0,
        "no transport failure": figures["transport_failures"] == 0,
        "every stream open and fed": streams["statuses"] == [200] and streams["events_min"] > 0,
        "the search kept running": figures.get("search_status_after") == "running",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    token: str
    process: subprocess.Popen
    log: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)


@contextlib.contextmanager
def serving(workdir: Path, devices: int = 2, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A `quanta serve` on a free loopback port, SQLite in `workdir`, until /healthz says its controller
    runs; stopped (SIGTERM, then SIGKILL) on leaving."""
    token = "bench-" + os.urandom(16).hex()
    port = _free_port()
    log = workdir / "serve.log"
    env = {
        **os.environ,
        "QUANTA_TOKEN": token,
        "QUANTA_TRAINABLE_ALLOWLIST": "bench.",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    cmd = [sys.executable, "-m", "quanta.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--db", f"sqlite:///{workdir / 'quanta.db'}", "--devices", f"cpu:{devices}", "--workdir", str(workdir)]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", token, process, log)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise SystemExit(f"quanta serve exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = httpx.get(server.url + "/healthz", timeout=2)
                if r.status_code == 200 and r.json().get("controller") == "running":
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"quanta serve was not ready within 120 s; see {log}")
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_search(server: Server, spec: dict[str, Any] = SPEC, timeout_s: float = 60.0) -> tuple[int, int]:
    """Submit `spec`; (search id, the id of its first trial) once a trial exists."""
    with server.client() as http:
        r = http.post("/api/v1/searches", json=spec)
        if r.status_code != 201:
            raise SystemExit(f"the search was refused: {r.status_code} {r.text}")
        sid = int(r.json()["id"])
        deadline = time.monotonic() + timeout_s
        while not (items := http.get(f"/api/v1/searches/{sid}/trials").json()["items"]):
            if time.monotonic() > deadline:
                raise SystemExit(f"no trial of search {sid} started within {timeout_s:.0f} s")
            time.sleep(0.2)
        return sid, int(items[0]["id"])


def measure(
    seconds: float,
    clients: int,
    streams: int,
    devices: int = 2,
    routes: Callable[[int, int], Sequence[Route]] = read_routes,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Start a server and a search, load it (`routes(search id, trial id)`: the requests the clients pick
    from), stop the search; the figures, with the load average before and after and the search's status
    at the end."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="quanta-load-")))
        server = stack.enter_context(serving(workdir, devices))
        sid, trial_id = start_search(server)
        before = os.getloadavg()
        figures = asyncio.run(run_load(server.url, server.token, routes(sid, trial_id), seconds, clients, streams, sid))
        after = os.getloadavg()
        with server.client() as http:
            figures["search_status_after"] = http.get(f"/api/v1/searches/{sid}").json()["status"]
            http.post(f"/api/v1/searches/{sid}/stop")
    figures["load_average"] = {"before": [round(x, 2) for x in before], "after": [round(x, 2) for x in after]}
    figures["config"] = {"seconds": seconds, "clients": clients, "streams": streams, "devices": devices}
    figures["goals"] = goals_met(figures)
    return figures


def table(figures: dict[str, Any]) -> str:
    """The figures as a table: per route, then the totals and the goals."""
    from rich.console import Console
    from rich.table import Table

    streams = figures["streams"]
    t = Table(title=f"{figures['clients']} clients, {streams['opened']} event streams, {figures['seconds']} s")
    for name in ("route", "requests", "p50 ms", "p99 ms", "statuses"):
        t.add_column(name)
    for label, row in figures["per_route"].items():
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(row["statuses"].items()))
        t.add_row(label, str(row["requests"]), str(row["p50_ms"]), str(row["p99_ms"]), codes)
    reads = f"{figures['read_requests_per_s']}/s"
    t.add_row("read routes", reads, str(figures["p50_ms"]), str(figures["p99_ms"]), "")
    console = Console(record=True, width=120)
    console.print(t)
    console.print(
        f"5xx {figures['server_errors_5xx']}, transport failures {figures['transport_failures']}; streams "
        f"{streams['statuses']}, events per stream >= {streams['events_min']}; search "
        f"{figures.get('search_status_after')}; load average {figures['load_average']}"
    )
    for goal, met in figures["goals"].items():
        console.print(f"  {'met' if met else 'MISSED'}: {goal}")
    return console.export_text()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--streams", type=int, default=20)
    ap.add_argument("--devices", type=int, default=2, help="CPU devices of the server (its trials run there)")
    ap.add_argument(
        "--json", type=Path, default=None, help="write the figures here (bench/results/reliability/load.json)"
    )
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.clients < 1 or args.streams < 0 or args.devices < 1:
        ap.error("--seconds must be > 0, --clients and --devices >= 1, --streams >= 0")
    figures = measure(args.seconds, args.clients, args.streams, args.devices)
    table(figures)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    return figures


if __name__ == "__main__":
    main()
