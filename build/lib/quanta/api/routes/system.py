"""/healthz (no auth) and /metrics (Prometheus text format)."""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from quanta.api.deps import Authenticated, CurrentUser, SettingsDep, StoreDep, owner_filter
from quanta.api.metrics import make_registry
from quanta.api.models import Health
from quanta.api.routes.common import AUTH_ERRORS

router = APIRouter(tags=["system"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
async def healthz(request: Request, store: StoreDep) -> Health | JSONResponse:
    """Liveness: the database answers and, when this server runs the controller loop, the loop is alive
    (503 otherwise). `controller` says its state (`starting`, `running`, `stopped`, `failed`, or `none`
    when the API runs without one). It never queues behind other requests: the database is pinged on a
    thread of its own, not from the pool the other routes share."""
    state = getattr(request.app.state, "controller_state", None)
    controller = state() if callable(state) else "none"
    try:
        await anyio.to_thread.run_sync(store.ping, limiter=_ping_limiter(request))
    except Exception:
        return JSONResponse(Health(status="database unavailable", controller=controller).model_dump(), 503)
    if controller == "failed":  # the API answers, but nothing schedules: not healthy
        return JSONResponse(Health(status="controller not running", controller=controller).model_dump(), 503)
    return Health(status="ok", controller=controller)


def _ping_limiter(request: Request) -> anyio.CapacityLimiter:
    """The app's thread for /healthz's ping (made on first use, in the event loop)."""
    limiter = getattr(request.app.state, "ping_threads", None)
    if limiter is None:
        limiter = request.app.state.ping_threads = anyio.CapacityLimiter(2)
    return limiter


@router.get(
    "/metrics",
    dependencies=[Authenticated],
    response_class=Response,
    responses={**AUTH_ERRORS, 200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
def metrics(request: Request, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> Response:
    """Trials by state, device busy fraction, quanta, suspend/resume latency histograms, best metrics.
    A member's counts and best metrics are of their own searches only."""
    owner = owner_filter(user)
    registry = request.app.state.metrics_registry
    if owner is not None:  # a member's own figures: a registry for this request
        registry = make_registry(store, settings.metrics_window_s, owner)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
