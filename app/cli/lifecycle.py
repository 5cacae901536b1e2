"""What users do with a search once it exists, in a database (`--db`, default $QUANTA_DB_URL or
sqlite:///quanta.db: what `quanta run` wrote) or on a running server (`--url`, or $QUANTA_URL; token
from --token or $QUANTA_TOKEN):

    quanta resume SEARCH [--trials N] [--seconds S]   go on with a stopped, completed or paused search,
                                                      its budget raised by N trials and S seconds; with a
                                                      database, it runs here in the foreground as
                                                      `quanta run` does (same options and exit codes)
    quanta delete SEARCH [--yes]                      delete it with everything recorded about it
    quanta tag SEARCH [TAG...] [--remove TAG] [--note TEXT]
                                                      add (or remove) tags, write its notes; print them

It also holds what `quanta run` prints when interrupted (`interrupted_report`): the best so far and the
command that resumes the search.

Checkpoints and logs are where `quanta run` put them: a folder of the database's own under `.quanta/`
unless `--workdir` (or $QUANTA_WORKDIR) names one (`quanta.workdir`).

Exit codes: as `quanta run` for a resume run here; otherwise 0 done, 2 bad input (no such search, a
refused request, a value out of bounds, a database a controller holds), 1 the server cannot be reached."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from quanta.cli.output import EXIT_BAD_INPUT, fail, search_exit_code, write_json_atomic
from quanta.cli.remote import server_client
from quanta.cli.summary import print_summary

if TYPE_CHECKING:
    from quanta.db.store import Store

EXIT_INTERRUPTED = 130
DEFAULT_DB = "sqlite:///quanta.db"

SearchArg = Annotated[int, typer.Argument(metavar="SEARCH", help="a search id", min=1)]
DbOpt = Annotated[
    str | None, typer.Option("--db", help="this database (default: $QUANTA_DB_URL or sqlite:///quanta.db)")
]
UrlOpt = Annotated[str | None, typer.Option("--url", help="a running server instead (default: $QUANTA_URL)")]
TokenOpt = Annotated[str | None, typer.Option(help="API token (default: QUANTA_TOKEN)", envvar="QUANTA_TOKEN")]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option(
        help="with a database: its checkpoints and logs (default: as `quanta run`, a folder of the database's own)",
        envvar="QUANTA_WORKDIR",
        show_default=False,
    ),
]


def _target(db: str | None, url: str | None) -> tuple[str | None, str | None]:
    """(database, None) or (None, server): `--db` and `--url` as given (not both), else $QUANTA_URL, else
    $QUANTA_DB_URL or the default database."""
    if db and url:
        raise fail("give --db or --url, not both")
    if db:
        return db, None
    url = url or os.environ.get("QUANTA_URL")
    if url:
        return None, url
    return os.environ.get("QUANTA_DB_URL") or DEFAULT_DB, None


def _open_store(db: str) -> Store:
    """The database at `db`; one that does not exist is not created (a mistyped path would make an empty
    one)."""
    from quanta.db.engine import sqlite_path
    from quanta.db.store import Store

    path = sqlite_path(db)
    if path is not None and not Path(path).is_file():
        raise fail(f"no database at {db}")
    try:
        return Store(db)
    except Exception as exc:
        raise fail(f"cannot open database {db}: {exc}") from None


# ---- what an interrupted run prints ----------------------------------------------------------------


def interrupted_report(store: Store, search_id: int, db: str, workdir: Path) -> str:
    """What an interrupted `quanta run` (or `quanta resume`) prints: the search stopped, its best trial so
    far (id, metric value, config) or that none reported yet, and the command that resumes it (naming
    `workdir` when it is not the database's own)."""
    from quanta.workdir import workdir_for

    row = store.search(search_id)
    if row is None:
        return f"interrupted: search {search_id} is gone"
    metric = (row.spec.get("metric") or {}).get("name", "metric")
    trials = store.trials(search_id)
    lines = [f"interrupted: search {search_id} ({row.name}) stopped with {len(trials)} trials"]
    if row.best_trial_id is None or row.best_metric is None:
        lines.append(f"  best so far: none (no trial reported {metric} yet)")
    else:
        number = next((t.number for t in trials if t.id == row.best_trial_id), None)
        which = f"trial {row.best_trial_id}" + (f" (#{number} of the search)" if number is not None else "")
        lines.append(f"  best so far: {which}, {metric} = {row.best_metric:.6g}")
        lines.append(f"  config: {json.dumps(row.best_params, sort_keys=True)}")
    own = Path(workdir) == workdir_for(db, None)
    lines.append(f"  resume it: quanta resume {search_id} --db {db}" + ("" if own else f" --workdir {workdir}"))
    return "\n".join(lines)


# ---- quanta resume ---------------------------------------------------------------------------------------


def resume(
    search_id: SearchArg,
    trials: Annotated[int, typer.Option("--trials", min=0, help="trials added to its budget")] = 0,
    seconds: Annotated[float, typer.Option("--seconds", min=0, help="seconds added to its time budget")] = 0.0,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    devices: Annotated[
        str, typer.Option(help="with a database: cpu:N, cuda:0,1, cuda:all or auto", envvar="QUANTA_DEVICES")
    ] = "auto",
    workdir: WorkdirOpt = None,
    output: Annotated[Path | None, typer.Option(help="with a database: write the result as JSON here")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Resume a stopped, completed or paused search, or extend it with more trials or time.

    Its searcher goes on from every trial so far (only new configurations), and the trials its end
    stopped go on from their checkpoints. The time it spent stopped is not counted against its time
    budget; one that ended at its target goes on to its budget. With a database (the default) it runs here
    until it ends, as `quanta run` does, with its exit codes (0 target reached, or none and its budget
    spent; 3 not reached; 4 failed; 130 interrupted); with --url the server's controller takes it up."""
    database, server = _target(db, url)
    if server is not None:
        with server_client(server, token) as client:
            search = client.search(search_id).resume(trials=trials, seconds=seconds)
        budget = (search.data.get("spec") or {}).get("budget") or {}
        typer.echo(
            f"search {search.id} ({search.name}): resume requested ({search.status}; budget now "
            f"{budget.get('max_trials')} trials, {budget.get('max_seconds')} s)"
        )
        return
    assert database is not None
    _resume_here(search_id, trials, seconds, database, devices, workdir, output, verbose)


def _resume_here(
    search_id: int,
    trials: int,
    seconds: float,
    db: str,
    devices: str,
    workdir: Path | None,
    output: Path | None,
    verbose: bool,
) -> None:
    """`quanta resume --db`: the search run here until it ends, with `quanta run`'s progress and result."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from quanta.db.errors import BudgetError, Conflict
    from quanta.db.lease import ControllerLease, LeaseHeld
    from quanta.devices import DeviceSpecError, parse_devices
    from quanta.spec import SpecError, place_locally, spec_from_stored
    from quanta.stored_search import SearchProgress, resume_search
    from quanta.workdir import WorkdirTaken, claim_workdir, workdir_for

    store = _open_store(db)
    row = store.search(search_id)
    if row is None:
        raise fail(f"search {search_id} not found in {db}")
    # Its trainable is found as `quanta run` finds one: from the working directory (its folder goes on
    # sys.path, which the trial template inherits).
    sys.path.insert(0, os.getcwd())
    try:
        place_locally(spec_from_stored(row.spec), Path.cwd())
    except SpecError as exc:
        raise fail(f"search {search_id}: {exc} (run `quanta resume` in the folder `quanta run` ran in)") from None
    try:
        devs = parse_devices(devices)
    except DeviceSpecError as exc:
        raise fail(str(exc)) from None
    try:
        lease = ControllerLease(db)
        lease.acquire()
    except (LeaseHeld, ValueError) as exc:
        raise fail(f"{exc} (resume it there: quanta resume {search_id} --url URL)") from None
    work = workdir_for(db, workdir)  # where `quanta run` put its checkpoints
    try:
        claim_workdir(work, db)
    except (WorkdirTaken, OSError) as exc:
        lease.release()
        raise fail(str(exc)) from None
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TextColumn("{task.fields[use]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        ) as progress:
            task = progress.add_task(f"search {search_id}", total=None, best="best -", use="")

            def show(p: SearchProgress) -> None:
                best = f"best {p.metric}={p.best:.4f}" if p.best is not None else "best -"
                if p.reached:
                    best += " [green](target reached)[/]"
                use = f"devices busy {p.busy_devices}/{p.devices}"
                progress.update(task, description=p.name, total=p.max_trials, completed=p.done, best=best, use=use)

            result = resume_search(
                search_id,
                devs,
                db=db,
                workdir=work,
                more_trials=trials,
                more_seconds=seconds,
                lease=lease,
                on_step=show,
            )
    except (Conflict, BudgetError, RuntimeError, SpecError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        typer.echo(interrupted_report(store, search_id, db, work))
        raise typer.Exit(EXIT_INTERRUPTED) from None
    finally:
        lease.release()
    metric = row.spec.get("metric") or {}
    print_summary(result, metric.get("name", "metric"), metric.get("goal", "maximize"), db, work)
    if output:
        write_json_atomic(output, result)
    raise typer.Exit(search_exit_code(result["status"], result["reached"], result["target"]))


# ---- quanta delete ---------------------------------------------------------------------------------------


def delete(
    search_id: SearchArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="with a database: its checkpoints and logs, deleted too (default: the database's own folder)",
            envvar="QUANTA_WORKDIR",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Delete a search with its trials and everything recorded about them (asks first unless --yes).

    On a server its running trials are stopped first; in a database no controller may be running on it
    (delete through that server's --url instead)."""
    database, server = _target(db, url)
    if server is not None:
        with server_client(server, token) as client:
            search = client.search(search_id)
            _confirm(
                yes,
                search_id,
                search.name,
                search.status,
                int((search.data.get("progress") or {}).get("trials_created", 0)),
            )
            gone = search.delete()
        typer.echo(
            f"search {search_id} ({search.name}): " + ("deleted" if gone else "deleting (its trials are stopping)")
        )
        return
    assert database is not None
    from quanta.db.lease import LeaseHeld
    from quanta.stored_search import delete_stored_search
    from quanta.workdir import workdir_for

    store = _open_store(database)
    row = store.search(search_id)
    if row is None:
        raise fail(f"search {search_id} not found in {database}")
    _confirm(yes, search_id, row.name, row.status, len(store.trials(search_id)))
    try:  # no controller may hold its trials: it takes the database's lease
        deleted = delete_stored_search(database, search_id, workdir_for(database, workdir))
    except (LeaseHeld, ValueError) as exc:
        raise fail(f"{exc} (delete it there: quanta delete {search_id} --url URL)") from None
    if not deleted:
        raise fail(f"search {search_id} not found in {database}")
    typer.echo(f"search {search_id} ({row.name}): deleted")


def _confirm(yes: bool, search_id: int, name: str, status: str, trials: int) -> None:
    """Ask before deleting (unless `yes`); no terminal to ask on needs --yes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise fail(f"deleting search {search_id} cannot be undone: give --yes to confirm")
    question = f"Delete search {search_id} ({name}, {status}, {trials} trials) and everything recorded about it?"
    if not typer.confirm(question, default=False):
        typer.echo("nothing deleted")
        raise typer.Exit(EXIT_BAD_INPUT)


# ---- quanta tag ------------------------------------------------------------------------------------------


def tag(
    search_id: SearchArg,
    tags: Annotated[list[str] | None, typer.Argument(metavar="[TAG]...", help="tags to add")] = None,
    remove: Annotated[list[str] | None, typer.Option("--remove", "-r", help="a tag to remove (repeatable)")] = None,
    note: Annotated[str | None, typer.Option("--note", help='its notes ("" removes them)')] = None,
    db: DbOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add tags to a search (or --remove them) and write its --note; prints its tags and notes."""
    added, removed = list(tags or []), set(remove or [])
    database, server = _target(db, url)
    if server is not None:
        with server_client(server, token) as client:
            search = client.search(search_id)
            new = _tags_after(search.data.get("tags") or [], added, removed)
            if new is not None or note is not None:
                search.update(tags=new, notes=note)
        _show_tags(search_id, search.name, search.data.get("tags") or [], search.data.get("notes"))
        return
    assert database is not None
    from pydantic import ValidationError

    from quanta.db.public.searches import SearchPatch

    store = _open_store(database)
    row = store.search(search_id)
    if row is None:
        raise fail(f"search {search_id} not found in {database}")
    new = _tags_after(list(row.tags or []), added, removed)
    fields: dict[str, Any] = {}
    if new is not None:
        fields["tags"] = new
    if note is not None:
        fields["notes"] = note
    try:
        patch = SearchPatch(**fields)
    except ValidationError as exc:
        raise fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None
    out = store.patch_search(search_id, patch)
    assert out is not None
    _show_tags(search_id, out.name, out.tags, out.notes)


def _tags_after(current: list[str], added: list[str], removed: set[str]) -> list[str] | None:
    """The tags once `added` are added and `removed` removed (None: nothing to change)."""
    if not added and not removed:
        return None
    return [t for t in dict.fromkeys([*current, *added]) if t not in removed]


def _show_tags(search_id: int, name: str, tags: list[str], notes: str | None) -> None:
    typer.echo(f"search {search_id} ({name}): tags {', '.join(tags) if tags else '(none)'}")
    if notes:
        typer.echo(f"notes: {notes}")
