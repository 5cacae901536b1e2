"""Load: a real `quanta serve` with a search running, N concurrent API clients (httpx, asyncio; loopback
only) calling the read routes and the spec validation for a bounded time, plus M open event streams.
No request may get a 5xx or fail in transport; every stream must stay open and receive events. The
figures (requests held, p50/p99 latency per route) are printed and, with QUANTA_RELIABILITY_OUT, written
as JSON. Short form (make test): 8 s; long form (make chaos): QUANTA_LOAD_SECONDS=60."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.chaos.conftest import env_int, publish
from tests.integration.live_server import TOKEN, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300 + 2 * env_int("QUANTA_LOAD_SECONDS", 8))]

SPEC = {
    "name": "under-load",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.001, 0.1]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},  # never reached: it keeps running
    "budget": {"max_trials": 1000, "max_steps": 4000, "max_seconds": 900},
    "parallelism": 4,
    "search": {"algorithm": "random"},
    "scheduler": {"policy": "timeslice", "quantum_s": 1.0},
    "config": {"sleep_s": 0.005, "report_every": 20},
}
BAD_SPEC = {"name": "bad", "trainable": "examples.digits:train", "space": {}, "metric": {"name": "x"}}


def _routes(sid: int, trial_id: int) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """(label, method, path, json body) of the requests the clients pick from."""
    v1 = "/api/v1"
    return [
        ("GET /searches", "GET", f"{v1}/searches", None),
        ("GET /searches/{id}", "GET", f"{v1}/searches/{sid}", None),
        ("GET /searches/{id}/trials", "GET", f"{v1}/searches/{sid}/trials", None),
        ("GET /searches/{id}/curves", "GET", f"{v1}/searches/{sid}/curves", None),
        ("GET /searches/{id}/timeline", "GET", f"{v1}/searches/{sid}/timeline", None),
        ("GET /searches/{id}/best", "GET", f"{v1}/searches/{sid}/best", None),
        ("GET /trials/{id}", "GET", f"{v1}/trials/{trial_id}", None),
        ("GET /cluster", "GET", f"{v1}/cluster", None),
        ("GET /metrics", "GET", "/metrics", None),
        ("GET /healthz", "GET", "/healthz", None),
        ("POST /searches (invalid: 422)", "POST", f"{v1}/searches", BAD_SPEC),
    ]


async def _load(url: str, sid: int, trial_id: int, seconds: float, clients: int, streams: int) -> dict[str, Any]:
    routes = _routes(sid, trial_id)
    timings: dict[str, list[float]] = defaultdict(list)
    statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    failures: list[str] = []
    stream_events: list[int] = []
    stream_status: list[int] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    # Idle connections are dropped before the server's keep-alive timeout (uvicorn: 5 s) could close one
    # under a request being sent on it, as browsers do (a reset there is a client-side race, not a fault).
    limits = httpx.Limits(
        max_connections=clients + streams + 10, max_keepalive_connections=clients + streams, keepalive_expiry=2.0
    )
    end = time.monotonic() + seconds

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as client:

        async def one_client(seed: int) -> None:
            rng = random.Random(seed)
            while time.monotonic() < end:
                label, method, path, body = rng.choice(routes)
                t0 = time.perf_counter()
                try:
                    r = await client.request(method, path, json=body)
                    await r.aread()
                except httpx.HTTPError as exc:
                    failures.append(f"{label}: {type(exc).__name__} {exc}")
                    continue
                timings[label].append(time.perf_counter() - t0)
                statuses[label][r.status_code] += 1

        async def one_stream() -> None:
            events = 0
            try:
                params = {"search_id": sid, "max_seconds": seconds + 2}
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

    per_route = {}
    for label, ts in sorted(timings.items()):
        ms = np.array(ts) * 1000
        per_route[label] = {
            "requests": len(ts),
            "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p99_ms": round(float(np.percentile(ms, 99)), 1),
            "statuses": dict(statuses[label]),
        }
    total = sum(len(t) for t in timings.values())
    return {
        "seconds": seconds,
        "clients": clients,
        "streams": streams,
        "requests": total,
        "requests_per_s": round(total / seconds, 1),
        "server_errors_5xx": sum(n for s in statuses.values() for code, n in s.items() if code >= 500),
        "transport_failures": len(failures),
        "failures_sample": failures[:5],
        "stream_statuses": sorted(set(stream_status)),
        "stream_events_min": min(stream_events) if stream_events else 0,
        "per_route": per_route,
    }


def test_the_api_holds_concurrent_clients_and_event_streams_while_a_search_runs(tmp_path: Path) -> None:
    seconds = float(env_int("QUANTA_LOAD_SECONDS", 8))
    clients = env_int("QUANTA_LOAD_CLIENTS", 50)
    streams = env_int("QUANTA_LOAD_STREAMS", 20)
    server = start_server(tmp_path, devices="cpu:2")
    try:
        server.wait_ready()
        r = server.post("/api/v1/searches", json=SPEC)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        deadline = time.monotonic() + 60
        while not (items := server.get(f"/api/v1/searches/{sid}/trials").json()["items"]):
            assert time.monotonic() < deadline, "no trial started"
            time.sleep(0.2)
        figures = asyncio.run(_load(server.url, sid, items[0]["id"], seconds, clients, streams))
        still = server.get(f"/api/v1/searches/{sid}").json()["status"]
        server.post(f"/api/v1/searches/{sid}/stop")
    finally:
        server.stop()
    figures["search_status_during_load"] = still
    publish("load", figures)
    assert figures["server_errors_5xx"] == 0, figures
    assert figures["transport_failures"] == 0, figures
    assert figures["stream_statuses"] == [200] and figures["stream_events_min"] > 0, figures
    assert still == "running", "the search should have run during the whole load"
    assert figures["requests"] > clients, figures
