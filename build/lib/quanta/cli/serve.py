"""`quanta serve`: the API (uvicorn) and the controller (`quanta.service.ControllerThread`: the controller
loop in a thread of its own, with a LocalRuntime) in one process.

The API threads only read and write database rows; the loop's thread owns the controller. On start the
loop calls `Controller.load()`, so a server killed in the middle of a search continues it: trials that
were running restart from their checkpoints. On SIGINT/SIGTERM the server stops taking requests, asks
resident trials for a checkpoint, and closes the runtime (trial processes exit); the searches stay
`running` in the database and continue at the next start.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from quanta.cli.output import EXIT_BAD_INPUT, fail
from quanta.cli.share_options import FavourOption, RhoBoundOption, RhoCapOption, WeightsOption, WindowOption

log = logging.getLogger("quanta.serve")


def _server(config: Any, stopping: threading.Event) -> Any:
    """A uvicorn.Server that also tells the app it is stopping (so event streams end promptly)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()
            super().handle_exit(sig, frame)

    return Server(config)


def _setting_error(error: Any) -> str:
    """One of the settings' validation errors, named by its environment variable."""
    msg = str(error["msg"]).removeprefix("Value error, ")
    name = "QUANTA_" + "_".join(str(p) for p in error["loc"]).upper()
    return msg if msg.startswith(name) else f"{name}: {msg}"


def serve(
    host: Annotated[str, typer.Option(help="address to listen on", envvar="QUANTA_HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on", envvar="QUANTA_PORT")] = 8000,
    db: Annotated[str, typer.Option(help="database URL", envvar="QUANTA_DB_URL")] = "sqlite:///quanta.db",
    devices: Annotated[str, typer.Option(help="cpu:N, cuda:0,1, cuda:all or auto", envvar="QUANTA_DEVICES")] = "auto",
    workdir: Annotated[Path, typer.Option(help="checkpoints and trial logs", envvar="QUANTA_WORKDIR")] = Path(
        ".quanta"
    ),
    broker: Annotated[
        str | None,
        typer.Option(help="Redis URL: run trials on `quanta worker` nodes instead of here", envvar="QUANTA_BROKER"),
    ] = None,
    share_window_s: WindowOption = None,
    favour_worst_rho: FavourOption = False,
    rho_cap: RhoCapOption = None,
    rho_bound: RhoBoundOption = None,
    weight: WeightsOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve the REST API and dashboard, and run searches on this machine's devices.

    Prints the dashboard URL and an API token (or uses QUANTA_TOKEN). Trainables posted through the API
    must come from modules under QUANTA_TRAINABLE_ALLOWLIST (default 'examples.'). Device time is
    divided between users by the share layer: its knobs and users' weights are options here."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from pydantic import ValidationError

    from quanta.api.settings import Settings

    try:  # first: a QUANTA_TOKEN too short is refused before anything is imported, opened or shown
        settings = Settings(db_url=db, host=host, port=port, devices=devices, workdir=str(workdir))
    except ValidationError as exc:
        raise fail("; ".join(_setting_error(e) for e in exc.errors())) from None

    import uvicorn

    from quanta.api import auth
    from quanta.api.logs import install as redact_tokens
    from quanta.api.main import create_app
    from quanta.cli.share_options import ShareOptionError, apply_weights, share_options
    from quanta.db.store import Store
    from quanta.devices import DeviceSpecError, oversubscription, parse_devices
    from quanta.service import ControllerThread
    from quanta.syspath import drop_working_dir
    from quanta.workdir import WorkdirTaken, claim_workdir

    # Trainables come from installed packages and PYTHONPATH, never from the directory serve started in.
    drop_working_dir()
    try:
        devs = parse_devices(devices)
    except DeviceSpecError as exc:
        raise fail(str(exc)) from None
    crowded = oversubscription(devs)
    if crowded and not broker:
        typer.echo(f"{typer.style('warning:', fg='yellow', bold=True)} {crowded}", err=True)
    # One workdir per database: another database's checkpoints and logs there would be overwritten.
    try:
        claim_workdir(workdir, settings.db_url, write=False)  # claimed below, once nothing can refuse
    except (WorkdirTaken, OSError) as exc:
        raise fail(str(exc)) from None
    knobs, weights = share_options(share_window_s, favour_worst_rho, rho_cap, weight, rho_bound)
    try:
        store = Store(settings.db_url)
    except Exception as exc:
        raise fail(f"cannot open database {db}: {exc}") from None
    # One controller per database: this server's loop is one, so a second server (or `quanta run`,
    # `quanta controller`) on the same database is refused here, before anything is served.
    from quanta.db.lease import ControllerLease, LeaseHeld

    lease = ControllerLease(settings.db_url)
    try:
        lease.acquire()
    except LeaseHeld as exc:
        raise fail(str(exc)) from None
    try:
        apply_weights(store, weights)
        claim_workdir(workdir, settings.db_url)
    except (ShareOptionError, WorkdirTaken, OSError) as exc:
        lease.release()
        raise fail(str(exc)) from None
    token_from_env = bool(settings.token)
    if not settings.token:
        settings.token = auth.create_token(store, name=f"serve {time.strftime('%Y-%m-%d %H:%M:%S')}")
    app = create_app(settings, store=store)

    loop = ControllerThread(store, devs, workdir, broker=broker, lease=lease, share=knobs)
    app.state.controller_state = loop.state
    config = uvicorn.Config(app, host=host, port=port, log_level="info" if verbose else "warning")
    redact_tokens()  # after uvicorn set up its loggers: `?token=` of event streams stays out of the log
    config.timeout_graceful_shutdown = 5
    server = _server(config, app.state.stopping)

    url = f"http://{host}:{port}"
    typer.echo(f"Quanta API on {url}/api/v1 (OpenAPI at {url}/openapi.json)")
    if token_from_env:
        typer.echo(f"Dashboard: {url}/  (token from QUANTA_TOKEN)")
    else:
        typer.echo(f"Dashboard: {url}/?token={settings.token}")
        typer.echo(f"API token: {settings.token}")
    typer.echo(f"Devices: {', '.join(d.id for d in devs)}; database: {db}; allowed trainables: {settings.allowlist}")
    sys.stdout.flush()

    # uvicorn handles SIGINT/SIGTERM while it serves and re-raises them to the handlers found before it
    # started: make those harmless so shutdown continues here.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)
    loop.start()
    try:
        server.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal while stopping: leave at once
            signal.signal(sig, lambda signum, _: os._exit(128 + signum))
        app.state.stopping.set()
        typer.echo("stopping: checkpointing trials and closing the runtime", err=True)
        loop.stop()
    if not server.started:
        raise typer.Exit(EXIT_BAD_INPUT)
