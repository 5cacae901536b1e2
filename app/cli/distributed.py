"""`quanta controller` and `quanta worker`: distributed mode's commands. The wiring they use
(`make_runtime`, `ControllerLoop`) lives in `quanta.service`.

    export QUANTA_DB_URL=postgresql://quanta:PASSWORD@db:5432/quanta QUANTA_BROKER=redis://:PASSWORD@redis:6379/0
    quanta worker --node n1 --devices cuda:all --checkpoints /shared/checkpoints
    quanta controller --checkpoints /shared/checkpoints

The URLs are read from the environment (QUANTA_DB_URL, QUANTA_BROKER) so that their passwords stay off
command lines, which every user of the machine can read (`ps`); `--db` and `--broker` still work.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer

from quanta.cli.output import fail
from quanta.cli.share_options import FavourOption, RhoBoundOption, RhoCapOption, WeightsOption, WindowOption


def controller(
    broker: Annotated[str, typer.Option(help="Redis URL of the broker", envvar="QUANTA_BROKER")],
    db: Annotated[str, typer.Option(help="database URL (PostgreSQL)", envvar="QUANTA_DB_URL")],
    checkpoints: Annotated[
        Path, typer.Option(help="checkpoint store every node can read", envvar="QUANTA_CHECKPOINTS")
    ] = Path(".quanta"),
    dead_after: Annotated[float, typer.Option(help="seconds without a heartbeat before a node is lost")] = 10.0,
    action_timeout: Annotated[
        float, typer.Option(help="seconds for a node to apply a round before the trials are planned again")
    ] = 30.0,
    standby: Annotated[
        bool, typer.Option("--standby", help="wait while another controller holds the database, then take over")
    ] = False,
    share_window_s: WindowOption = None,
    favour_worst_rho: FavourOption = False,
    rho_cap: RhoCapOption = None,
    rho_bound: RhoBoundOption = None,
    weight: WeightsOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the controller loop alone against the registered worker nodes (searches are submitted
    through the API or the database). Stops on SIGINT/SIGTERM; trials keep running on their nodes and
    a restarted controller takes them over. One controller per database: a second one is refused, or
    with --standby waits until the first has gone."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from quanta.cli.share_options import ShareOptionError, apply_weights, share_options
    from quanta.controller import Controller, ControllerOptions
    from quanta.controller.options import READ_STORE_EVERY_S, READER_PUBLISH_EVERY_S, SERVICE_SEARCHER_WAIT_S
    from quanta.db.lease import ControllerLease, LeaseHeld
    from quanta.db.store import Store
    from quanta.service import ControllerLoop, make_runtime
    from quanta.syspath import drop_working_dir

    drop_working_dir()  # nothing is imported from the directory the controller started in
    knobs, weights = share_options(share_window_s, favour_worst_rho, rho_cap, weight, rho_bound)
    try:
        store = Store(db)
    except Exception as exc:
        raise fail(f"cannot open database {db}: {exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    lease = ControllerLease(db)
    try:
        lease.acquire()
    except LeaseHeld as exc:
        if not standby:
            raise fail(str(exc)) from None
        typer.echo(f"standing by: {exc}")
        sys.stdout.flush()
        try:
            lease.acquire(float("inf"), stop=stop)
        except LeaseHeld:  # stopped while standing by
            raise typer.Exit(0) from None
        typer.echo("taking over: the lease is ours")
    try:
        apply_weights(store, weights)
    except ShareOptionError as exc:
        lease.release()
        raise fail(str(exc)) from None
    checkpoints.mkdir(parents=True, exist_ok=True)
    runtime = make_runtime(broker, store, checkpoints, dead_after_s=dead_after, expect_timeout_s=action_timeout)
    options = ControllerOptions(
        workdir=checkpoints,
        share=knobs,
        searcher_wait_s=SERVICE_SEARCHER_WAIT_S,
        publish_every_s=READER_PUBLISH_EVERY_S,
        read_store_every_s=READ_STORE_EVERY_S,
    )
    ctl = Controller(store, runtime, options)
    ctl.load()
    alive = [f"{n} ({len(v['devices'])} devices)" for n, v in runtime.nodes().items() if v["alive"]]
    typer.echo(f"quanta controller: {len(ctl.searches())} active searches; nodes: {', '.join(alive) or 'none yet'}")
    sys.stdout.flush()
    try:
        ControllerLoop(ctl, store, checkpoints, lease=lease, stop=stop).run()
    except LeaseHeld as exc:
        raise fail(f"lost the database to another controller: {exc}") from None
    finally:
        ctl.close()
        lease.release()


def worker(
    node: Annotated[str, typer.Option(help="this node's name, unique in the cluster", envvar="QUANTA_NODE")],
    broker: Annotated[str, typer.Option(help="Redis URL of the broker", envvar="QUANTA_BROKER")],
    db: Annotated[str, typer.Option(help="database URL (PostgreSQL)", envvar="QUANTA_DB_URL")],
    checkpoints: Annotated[
        Path, typer.Option(help="checkpoint store every node can read", envvar="QUANTA_CHECKPOINTS")
    ] = Path(".quanta"),
    devices: Annotated[str, typer.Option(help="cpu:N, cuda:0,1, cuda:all or auto", envvar="QUANTA_DEVICES")] = "auto",
    heartbeat: Annotated[float, typer.Option(help="seconds between heartbeats")] = 1.0,
    lease: Annotated[float, typer.Option(help="stop this node's trials after this long without a heartbeat")] = 5.0,
    warm: Annotated[str, typer.Option(help="trainable modules to import up front (comma-separated)")] = "",
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run this machine's node agent: a Celery worker on the queue `node.<name>` hosting the node's
    trial processes. Registers its devices and heartbeats to the database."""
    from quanta.devices import DeviceSpecError, parse_devices

    try:
        parse_devices(devices)
    except DeviceSpecError as exc:
        raise fail(str(exc)) from None
    if "/" in node or not node.strip():
        raise fail(f"node name '{node}' must be non-empty and contain no '/'")
    args = [
        *("--node", node, "--devices", devices),
        *("--checkpoints", str(checkpoints), "--heartbeat", str(heartbeat), "--lease", str(lease)),
        *(("--warm", warm) if warm else ()),
        *(("--verbose",) if verbose else ()),
    ]
    # The URLs carry passwords: they go to the worker program in its environment (readable by this
    # user only), never on its command line (readable by every user through `ps`).
    env = {**os.environ, "QUANTA_DB_URL": db, "QUANTA_BROKER": broker}
    sys.stdout.flush()
    sys.stderr.flush()
    # `workers/` is an entry point that imports `app`, never the other way round: run it as a program.
    os.execve(sys.executable, [sys.executable, "-P", "-m", "workers", *args], env)  # -P: not the working directory
