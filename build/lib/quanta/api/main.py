"""`create_app(settings)`: the FastAPI application. Nothing is created at import time: the store, the
token and the metrics registry are made here, per app."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from quanta.api import auth
from quanta.api.metrics import make_registry
from quanta.api.routes import analysis, cluster, events, lineage, searches, system, trials, users
from quanta.api.settings import Settings
from quanta.db.analysis import FitCache
from quanta.db.store import Store
from quanta.spec import SearchSpec

API_PREFIX = "/api/v1"
STATIC_DIR = Path(__file__).resolve().parent / "static"

_NO_DASHBOARD = """<!doctype html><html><head><meta charset="utf-8"><title>Quanta</title></head>
<body><h1>Quanta</h1><p>The dashboard's files are not installed (app/api/static/index.html).
The API is at <a href="/docs">/docs</a>.</p></body></html>"""


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated schema, plus `SearchSpec` (the POST /searches body is read raw, to accept YAML)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    spec_schema = SearchSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.update(spec_schema.pop("$defs", {}))
    components["SearchSpec"] = spec_schema
    app.openapi_schema = schema
    return schema


# Sent with every response (the dashboard's page also carries the CSP as a meta tag): the page runs only
# its own scripts, is never framed, and sends no referrer carrying a `?token=`.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def create_app(settings: Settings | None = None, *, store: Store | None = None) -> FastAPI:
    """The API with its own store (or the one given, shared with a controller in the same process).
    When `settings.token` is set, that token is accepted as the first admin's (its keyed hash is stored)."""
    settings = settings or Settings()
    store = store or Store(settings.db_url)
    if settings.token:
        auth.ensure_token(store, settings.token)

    app = FastAPI(
        title="Quanta",
        version="1.0.0",
        description="Hyperparameter search scheduled like Gandiva. Every route but /healthz and the dashboard "
        "needs `Authorization: Bearer <token>`.",
        # The interactive docs load scripts from a CDN on the dashboard's origin, where the token is kept:
        # off unless asked for (QUANTA_API_DOCS=1). /openapi.json is always served.
        docs_url="/docs" if settings.api_docs else None,
        redoc_url="/redoc" if settings.api_docs else None,
    )

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    app.state.settings = settings
    app.state.store = store
    app.state.metrics_registry = make_registry(store, settings.metrics_window_s)
    app.state.fit_cache = FitCache()  # importance and landscape, by what they were fitted on
    app.state.stopping = threading.Event()
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]  # FastAPI's documented override hook

    v1 = APIRouter(prefix=API_PREFIX)
    v1.include_router(searches.router)
    v1.include_router(analysis.router)
    v1.include_router(trials.router)
    v1.include_router(lineage.router)
    v1.include_router(cluster.router)
    v1.include_router(events.router)
    v1.include_router(users.router)
    app.include_router(v1)
    app.include_router(system.router)

    @app.get("/", include_in_schema=False)
    def dashboard() -> Response:
        index = STATIC_DIR / "index.html"
        if index.is_file():
            return FileResponse(index, headers={"Cache-Control": "no-cache"})
        return HTMLResponse(_NO_DASHBOARD)

    app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")
    return app
