"""`quanta serve`: the API (uvicorn) and the controller loop with a LocalRuntime in one process.

The controller is not thread-safe, so one background thread owns it (and the runtime): it ticks, turns
runtime events into rows, and carries out deletions the API requested. The API threads only read and
write database rows. On start the loop calls `Controller.load()`, so a server killed in the middle of a
search continues it: trials that were running restart from their checkpoints. On SIGINT/SIGTERM the
server stops taking requests, asks resident trials for a checkpoint, and closes the runtime (trial
processes exit); the searches stay `running` in the database and continue at the next start.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.status import SEARCH_STARTED, SearchStatus

if TYPE_CHECKING:
    from app.controller import Controller
    from app.db.store import Store
    from app.devices import Device

log = logging.getLogger("quanta.serve")

EXIT_ERROR = 2


class ControllerLoop:
    """Runs `Controller.step` in a thread of its own until `stop()`."""

    def __init__(
        self, store: Store, devices: list[Device], workdir: Path, *, tick_s: float = 0.5, broker: str | None = None
    ):
        self.store = store
        self.broker = broker  # distributed mode: trials run on `quanta worker` nodes, not on `devices`
        self.devices = devices
        self.workdir = Path(workdir)
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._state = "starting"
        self._deletable: dict[int, float] = {}
        self._thread = threading.Thread(target=self._main, name="quanta-controller", daemon=True)

    def state(self) -> str:
        return self._state

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    # ---- the thread --------------------------------------------------------------------------

    def _main(self) -> None:
        from app.controller import Controller
        from app.executor.runtime.local import LocalRuntime

        ctl: Controller | None = None
        runtime: LocalRuntime | None = None
        try:
            if self.broker:
                from app.cli_distributed import make_runtime

                runtime = make_runtime(self.broker, self.store, self.workdir)  # workdir: the shared checkpoints
            else:
                runtime = LocalRuntime(self.devices, lambda tid: ctl.launch(tid))  # type: ignore[union-attr]
            ctl = Controller(self.store, runtime, workdir=self.workdir)
            ctl.load()
            self._publish_devices(ctl)
            self._state = "running"
            log.info("controller running: %d active searches", len(ctl.searches))
            while not self._stop.is_set():
                try:
                    self._deletions(ctl)
                    ctl.step(max_wait=self.tick_s)
                except Exception:  # keep serving: the next tick starts again from the database
                    log.exception("controller tick failed")
                    self._stop.wait(1.0)
        except Exception:
            log.exception("controller failed")
            self._state = "failed"
        finally:
            if ctl is not None:
                self._shutdown(ctl)
            elif runtime is not None:
                runtime.close()
            if self._state != "failed":
                self._state = "stopped"

    def _publish_devices(self, ctl: Controller) -> None:
        """The devices with nothing on them yet (the controller publishes placements once it ticks)."""
        from app.db.models import ClusterView

        self.store.publish_cluster_view(ClusterView.idle(time.time(), ctl.runtime.devices()))

    def _deletions(self, ctl: Controller) -> None:
        """Carry out DELETE requests: stop the search, wait until its trial processes have exited
        (and their last events are recorded), then delete its rows and its checkpoints."""
        for sid in self.store.pending_deletes():
            s = ctl.searches.get(sid)
            if s is not None and s.status in SEARCH_STARTED:
                ctl.stop_search(sid, SearchStatus.STOPPED, "deleted by user")
            resident = ctl.runtime.residency()
            if any((t := ctl.trials.get(tid)) is not None and t.search_id == sid for tid in resident):
                self._deletable.pop(sid, None)
                continue
            first = self._deletable.setdefault(sid, time.monotonic())
            if time.monotonic() - first < 0.3:  # let the last exit events arrive
                continue
            ctl.handle(ctl.runtime.poll(0))
            ctl.flush()
            self.store.delete_search(sid)
            ctl.searches.pop(sid, None)
            for tid in [tid for tid, t in ctl.trials.items() if t.search_id == sid]:
                ctl.trials.pop(tid, None)
            shutil.rmtree(self.workdir / f"search-{sid}", ignore_errors=True)
            self._deletable.pop(sid, None)
            log.info("search %s deleted", sid)

    def _shutdown(self, ctl: Controller, wait_s: float = 10.0) -> None:
        """Checkpoint resident trials (bounded), then close the runtime: trial processes exit."""
        from app.executor.actions import Checkpointed

        try:
            waiting = set(ctl.runtime.residency())
            for tid in waiting:
                ctl.runtime.checkpoint(tid)  # type: ignore[attr-defined]
            deadline = time.monotonic() + wait_s
            while waiting and time.monotonic() < deadline:
                events = ctl.runtime.poll(0.2)
                waiting -= {e.trial_id for e in events if isinstance(e, Checkpointed)}
                waiting &= set(ctl.runtime.residency())
                ctl.handle(events)
            ctl.flush()
        except Exception:
            log.exception("checkpointing before shutdown failed")
        finally:
            ctl.close()


def _server(config: Any, stopping: threading.Event) -> Any:
    """A uvicorn.Server that also tells the app it is stopping (so event streams end promptly)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()
            super().handle_exit(sig, frame)

    return Server(config)


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
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve the REST API and dashboard, and run searches on this machine's devices.

    Prints the dashboard URL and an API token (or uses QUANTA_TOKEN). Trainables posted through the API
    must come from modules under QUANTA_TRAINABLE_ALLOWLIST (default 'examples.')."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    import uvicorn

    from app.api import auth
    from app.api.main import create_app
    from app.api.settings import Settings
    from app.db.store import Store
    from app.devices import DeviceSpecError, parse_devices

    sys.path.insert(0, os.getcwd())  # trainables of the working directory, as `quanta run` does
    try:
        devs = parse_devices(devices)
    except DeviceSpecError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    settings = Settings(db_url=db, host=host, port=port, devices=devices, workdir=str(workdir))
    try:
        store = Store(settings.db_url)
    except Exception as exc:
        typer.echo(f"error: cannot open database {db}: {exc}", err=True)
        raise typer.Exit(EXIT_ERROR) from None
    token_from_env = bool(settings.token)
    if not settings.token:
        settings.token = auth.create_token(store, name=f"serve {time.strftime('%Y-%m-%d %H:%M:%S')}")
    app = create_app(settings, store=store)

    loop = ControllerLoop(store, devs, workdir, broker=broker)
    app.state.controller_state = loop.state
    config = uvicorn.Config(app, host=host, port=port, log_level="info" if verbose else "warning")
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
        raise typer.Exit(EXIT_ERROR)
