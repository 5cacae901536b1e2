"""`quanta run SPEC`: run one search on this machine, in the foreground, until its target is reached or
its budget is spent; print the result (and write it as JSON with --output).

Exit codes: 0 target reached, or no target and the budget spent; 3 budget spent without reaching the
target; 4 the search failed (trials failing in a row, its metric never reported, every trial failed); 2
bad input (or the database is another controller's); 130 interrupted; other: error."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from quanta.cli.output import fail, search_exit_code, write_json_atomic
from quanta.cli.summary import print_summary
from quanta.status import SearchStatus

if TYPE_CHECKING:
    from quanta.db.lease import ControllerLease
    from quanta.devices import Device
    from quanta.executor.runtime.template import TemplateStart
    from quanta.spec import SearchSpec

EXIT_INTERRUPTED = 130


def run(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC", help="search spec (.yaml or .json)")],
    devices: Annotated[str, typer.Option(help="cpu:N, cuda:0,1, cuda:all or auto", envvar="QUANTA_DEVICES")] = "auto",
    db: Annotated[str, typer.Option(help="database URL", envvar="QUANTA_DB_URL")] = "sqlite:///quanta.db",
    output: Annotated[Path | None, typer.Option(help="write the result as JSON here")] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="checkpoints and trial logs (default: a folder of the database's own under .quanta/)",
            envvar="QUANTA_WORKDIR",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run a search on this machine until its target is reached or its budget is spent.

    Exit codes: 0 target reached (or no target, and the budget spent);
    3 target not reached; 4 the search failed (trials failing in a row,
    its metric never reported, every trial failed); 2 bad input;
    130 interrupted."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from quanta.spec import SpecError, load_spec, place_locally

    # The spec is validated first, before anything heavy is imported or started (validating costs a
    # tenth of a second; the template's torch seconds, on a busy machine many): a typo is refused at once.
    try:
        spec = load_spec(spec_path)
    except SpecError as exc:
        raise fail(str(exc)) from None
    # The trainable is found where the user keeps it (the working directory, beside the spec, or by its
    # path): its folder goes on sys.path, which the trial template and so every trial inherit.
    sys.path.insert(0, os.getcwd())
    try:
        spec = place_locally(spec, spec_path.parent)
    except SpecError as exc:
        raise fail(f"{spec_path}: trainable: {exc.errors[0][1]}") from None
    if spec.search.warm_start_from:
        # The searches it warm-starts from are read before the template starts too: a missing id or another
        # space is refused at once (the controller's submit checks again, with the lease held).
        from quanta.db.store import Store
        from quanta.db.warm import WarmStartError, check_warm_start

        store = Store(db)
        try:
            check_warm_start(store, spec)
        except WarmStartError as exc:
            raise fail(f"{spec.name}: {exc} (in {db})") from None
        finally:
            store.engine.dispose()
    from quanta.cli.prestart import claim
    from quanta.executor.runtime.template import start_template, template_path

    # Then the trial template: it imports torch and the trainable's module and prepares its data while
    # this process imports and starts the rest (measured: 2 s and 1.2 s, overlapped). Launched already,
    # before the command's own imports, when the spec's trainable line said the same (`quanta.cli.prestart`).
    template = claim(spec.module, template_path()) or start_template([spec.module])
    try:
        from quanta.devices import DeviceSpecError, oversubscription, parse_devices

        try:
            devs = parse_devices(devices)
        except DeviceSpecError as exc:
            raise fail(str(exc)) from None
        crowded = oversubscription(devs)
        if crowded:
            typer.echo(f"{typer.style('warning:', fg='yellow', bold=True)} {crowded}", err=True)
        # One controller per database: a `quanta serve` (or another run) on the same database refuses us.
        from quanta.db.lease import ControllerLease, LeaseHeld

        try:
            lease = ControllerLease(db)
            lease.acquire()
        except (LeaseHeld, ValueError) as exc:
            raise fail(str(exc)) from None
        # One workdir per database: searches are numbered per database, their files by that number.
        from quanta.workdir import WorkdirTaken, claim_workdir, workdir_for

        work = workdir_for(db, workdir)
        try:
            claim_workdir(work, db)
        except (WorkdirTaken, OSError) as exc:
            lease.release()
            raise fail(str(exc)) from None
    except BaseException:
        template.close()
        raise
    try:
        _run_search(spec, devs, template, db, lease, output, work)
    finally:
        lease.release()


def _discard_database(file: Path | None) -> None:
    """Remove the SQLite database `file` (and the files SQLite keeps beside it) that this run created,
    when nothing of its search was stored: a refused run leaves no database behind."""
    if file is None:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{file}{suffix}").unlink(missing_ok=True)


def _run_search(
    spec: SearchSpec,
    devs: list[Device],
    template: TemplateStart,
    db: str,
    lease: ControllerLease,
    output: Path | None,
    workdir: Path,
) -> None:
    """`quanta run` once the spec is valid and the lease is held: run it, print and write the result."""
    from quanta.controller import Controller, ControllerOptions
    from quanta.controller.options import READ_STORE_EVERY_S, READER_PUBLISH_EVERY_S
    from quanta.db.engine import sqlite_path
    from quanta.db.store import Store
    from quanta.db.summary import search_result
    from quanta.db.warm import WarmStartError
    from quanta.executor.runtime.local import LocalRuntime
    from quanta.service import ControllerLoop

    # A SQLite file this run creates: removed again when the run is refused before its search is stored.
    file = sqlite_path(db)
    new_file = Path(file) if file and not Path(file).exists() else None
    # The controller binds itself as the runtime's launcher before any trial starts.
    runtime = LocalRuntime(devs, warm_modules=[spec.module], template=template)
    store: Store | None = None
    ctl: Controller | None = None
    try:
        # Made while the template imports torch (seconds): the store and the controller (0.15-0.4 s here,
        # most of it the schema's creation and the imports Python compiles from source) and what the first
        # submit and tick import (every policy, the searchers), off the way to the first trial.
        store = Store(db)
        options = ControllerOptions(
            workdir=workdir, publish_every_s=READER_PUBLISH_EVERY_S, read_store_every_s=READ_STORE_EVERY_S
        )
        ctl = Controller(store, runtime, options)
        import quanta.search.factory  # noqa: F401
        from quanta.executor.policy import registry

        registry()
        # The template imports the trainable's module before any trial starts: a missing package stops the
        # run here, named with the extra that brings it, instead of failing every trial of the budget.
        problem = runtime.import_problem(spec.module)
        if problem is not None:
            raise fail(f"trainable '{spec.trainable}': {problem.sentence()}")
    except BaseException:  # also Ctrl-C while the template imports: no process outlives the command
        if ctl is not None:
            ctl.close()  # the runtime too
        else:
            runtime.close()
        if store is not None:
            store.engine.dispose()
        _discard_database(new_file)
        raise
    try:  # an earlier search to warm-start from, missing or with another space: nothing is stored
        search_id = ctl.submit(spec)
    except WarmStartError as exc:
        ctl.close()
        raise fail(f"{spec.name}: {exc} (in {db})") from None
    s = ctl.search(search_id)
    assert s is not None
    # A failing round ends the command with its error (a service would retry it).
    loop = ControllerLoop(ctl, store, workdir, lease=lease, retry_failed_ticks=False)
    metric = spec.metric
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[use]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        ) as progress:
            task = progress.add_task(spec.name, total=spec.budget.max_trials, best="best -", counts="", use="")

            def show() -> None:
                # The bar counts trials evaluated (ended, or judged at a rung): see `TrialCounts`.
                busy = {d for r in runtime.residency().values() if r.running for d in r.devices}
                best = f"best {metric.name}={s.best:.4f}" if s.best is not None else "best -"
                if s.reached_at is not None:
                    best += " [green](target reached)[/]"
                use = f"· devices busy {len(busy)}/{len(devs)}"
                counts = f"· trials {s.counts.text()}"
                progress.update(task, completed=s.counts.evaluated, best=best, counts=counts, use=use)

            loop.run(until=lambda: s.status != SearchStatus.RUNNING, on_step=show)
            ctl.settle()
            show()  # the last figures: the bar ends where the summary does
    except KeyboardInterrupt:
        from quanta.cli.lifecycle import interrupted_report
        from quanta.stored_search import settle_interrupted

        ctl.stop_search(search_id, SearchStatus.STOPPED, "interrupted")
        settle_interrupted(ctl)  # its trials checkpoint as they stop: `quanta resume` loses no work
        ctl.close()
        typer.echo(interrupted_report(store, search_id, db, workdir))  # the best so far, how to resume
        raise typer.Exit(EXIT_INTERRUPTED) from None
    ctl.close()
    result = search_result(store, search_id)
    result["devices"] = [d.id for d in devs]
    result["db"] = db
    print_summary(result, s.spec.metric.name, s.spec.metric.goal, db, workdir)
    if output:
        write_json_atomic(output, result)
    raise typer.Exit(search_exit_code(result["status"], result["reached"], result["target"]))
