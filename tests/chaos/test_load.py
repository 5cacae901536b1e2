"""Load: a real `quanta serve` with a search running, N concurrent API clients (httpx, asyncio; loopback
only) calling the read routes and the spec validation (an invalid `POST /searches`, 422) for a bounded
time, plus M open event streams, through the load benchmark's client (`bench/load.py`). No request may
get a 5xx or fail in transport; every stream must stay open and receive events; the search keeps
running. The figures are printed and, with QUANTA_RELIABILITY_OUT, written as JSON. Short form (make
test): 8 s; long form (make chaos): QUANTA_LOAD_SECONDS=60. The latency goals are the benchmark's to
measure on a quiet machine (docs/reliability.md), not asserted here."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.load import Route, measure, read_routes
from tests.chaos.conftest import env_int, publish

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300 + 2 * env_int("QUANTA_LOAD_SECONDS", 8))]

BAD_SPEC = {"name": "bad", "trainable": "examples.digits:train", "space": {}, "metric": {"name": "x"}}


def test_the_api_holds_concurrent_clients_and_event_streams_while_a_search_runs(tmp_path: Path) -> None:
    seconds = float(env_int("QUANTA_LOAD_SECONDS", 8))
    clients = env_int("QUANTA_LOAD_CLIENTS", 50)
    streams = env_int("QUANTA_LOAD_STREAMS", 20)

    def routes(search_id: int, trial_id: int) -> list[Route]:
        invalid = Route("POST /searches (invalid: 422)", "POST", "/api/v1/searches", BAD_SPEC)
        return [*read_routes(search_id, trial_id), invalid]

    figures = measure(seconds, clients, streams, routes=routes, workdir=tmp_path)
    publish("load", figures)
    assert figures["server_errors_5xx"] == 0, figures
    assert figures["transport_failures"] == 0, figures
    assert figures["streams"]["statuses"] == [200] and figures["streams"]["events_min"] > 0, figures
    assert figures["per_route"]["POST /searches (invalid: 422)"]["statuses"] == {422: figures["per_route"][
        "POST /searches (invalid: 422)"]["requests"]}  # fmt: skip
    assert figures["search_status_after"] == "running", "the search should have run during the whole load"
    assert figures["requests"] > clients, figures
