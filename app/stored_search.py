"""A stored search driven in the calling process, where no controller service runs: a new search run to
its end on this machine's devices, a stored one taken up again, one deleted, one's Pareto view read.
The commands that work on a database directly (`quanta resume --db`, `quanta delete --db`) and the SDK's
in-process search (`quanta.sdk.run`, a notebook's) call these; they hold no typer.

- `run_search(spec, devices, db=..., workdir=...)`: one search run to its end on this machine's devices in
  the calling thread, its result returned, with the controller loop every command runs
  (`quanta.service.ControllerLoop`), as `quanta run` drives it; `on_step` sees its `SearchProgress`.
- `resume_search(search_id, devices, ...)`: a stored search taken up again (more trials or time) and run
  to its end the same way (`quanta resume --db`).
- `delete_stored_search(db, search_id, workdir)`: one deleted, with its checkpoints, where no controller
  runs (`quanta delete --db`; a running controller deletes what the API asks in its loop).
- `stored_pareto(db, search_id)`: a search's Pareto view read from its stored reports, as the API answers it.
- `settle_interrupted(ctl)`: after an interrupt stopped a search, its trials checkpoint and end (bounded),
  so a resume loses no work (`run_search`, `resume_search` and `quanta run`).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quanta.service import ControllerLoop
from quanta.status import SearchStatus, TrialCounts

if TYPE_CHECKING:
    from quanta.controller import Controller
    from quanta.db.lease import ControllerLease
    from quanta.db.store import Store
    from quanta.devices import Device
    from quanta.executor.runtime.template import TemplateStart
    from quanta.spec import SearchSpec

log = logging.getLogger("quanta.service")


@dataclass(frozen=True)
class SearchProgress:
    """What a search run by `run_search` has done so far, after each step of its controller: trials
    evaluated (`done`: ended, or judged at a rung; `TrialCounts.evaluated`) of `max_trials`, how its
    trials stand (`counts`), the best metric (None before the first report), whether the target was
    reached, and how many of the runtime's devices are computing now."""

    search_id: int
    name: str
    metric: str
    done: int
    counts: TrialCounts
    max_trials: int
    best: float | None
    reached: bool
    busy_devices: int
    devices: int


def run_search(
    spec: SearchSpec,
    devices: list[Device],
    *,
    db: str = "sqlite:///quanta.db",
    workdir: str | Path = ".quanta",
    lease: ControllerLease | None = None,
    template: TemplateStart | None = None,
    on_step: Callable[[SearchProgress], None] | None = None,
) -> dict[str, Any]:
    """Run the validated `spec` as a new search on `devices` (this machine's) in the calling thread until
    it ends (target reached, budget spent), with the controller loop every command runs
    (`ControllerLoop`), and return its result: `quanta.db.summary.search_result` with `devices` and `db`
    added (what `quanta run --output` writes).

    `lease`: the database's controller lease, held by the caller; None: taken here (`LeaseHeld`, naming
    the holder, when another controller runs on `db`; nothing is stored then) and released at the end.
    `template`: a trial template started early (`start_template`), else one is started here.
    `on_step(progress)`: called after every step of the controller. `WarmStartError`: an earlier search
    named in `search.warm_start_from` is missing or has another space (nothing stored). `SpecError` on
    `trainable`: its module fails to import in the trial template (a package it needs is missing; nothing
    stored, no trial started). A failing round
    ends the search with its error (no retries: there is no service to outlive it). KeyboardInterrupt:
    the search is stopped (`interrupted`), its trials write their checkpoints and end (a second interrupt
    cuts that short), and the interrupt goes on up: `resume_search` takes it up again."""
    return _run_local(db, devices, workdir, lease, template, on_step, spec, lambda ctl, store: ctl.submit(spec))


def resume_search(
    search_id: int,
    devices: list[Device],
    *,
    db: str = "sqlite:///quanta.db",
    workdir: str | Path = ".quanta",
    more_trials: int = 0,
    more_seconds: float = 0.0,
    lease: ControllerLease | None = None,
    template: TemplateStart | None = None,
    on_step: Callable[[SearchProgress], None] | None = None,
) -> dict[str, Any]:
    """Take search `search_id` of `db` up again on `devices` (this machine's) with its budget raised by
    `more_trials` and `more_seconds`, in the calling thread, until it ends, as `run_search` runs a new one
    (same `lease`, `template`, `on_step`, result and interrupt), with `workdir` the folder its checkpoints
    are in (the one it ran with). What a resume does is `Store.resume_search`'s: a stopped or completed
    search goes on from its history and the trials its end stopped from their checkpoints; a running or
    paused one whose controller ended without ending it is taken up as after a restart.

    `KeyError`: no such search. `Conflict`: it cannot be resumed (queued, failed, or it would end again at
    once: its budget spent), `BudgetError`: the raised budget is out of bounds, both naming why; nothing is
    changed then. `RuntimeError`: the controller could not take it up (the reason is also stored as its
    error)."""
    from quanta.db.errors import Conflict
    from quanta.db.store import Store
    from quanta.spec import SpecError, spec_from_stored

    row = Store(db).search(search_id)
    if row is None:
        raise KeyError(f"search {search_id} not found in {db}")
    try:
        spec = spec_from_stored(row.spec)
    except SpecError as exc:
        raise Conflict(f"cannot resume search {search_id}: its stored spec does not parse ({exc})") from None

    def take_up(ctl: Controller, store: Store) -> int:
        store.resume_search(search_id, time.time(), more_trials=more_trials, more_seconds=more_seconds, unheld=True)
        ctl.tick()  # its first round takes it up (`SearchBook`)
        s = ctl.search(search_id)
        if s is None or s.status != SearchStatus.RUNNING:
            after = store.search(search_id)
            why = (after.error if after is not None else None) or "its controller did not take it up"
            raise RuntimeError(f"search {search_id} cannot be resumed: {why}")
        return search_id

    return _run_local(db, devices, workdir, lease, template, on_step, spec, take_up)


def delete_stored_search(db: str, search_id: int, workdir: str | Path) -> bool:
    """Delete search `search_id` of `db` with everything recorded about it and its checkpoints and logs
    under `workdir`, where no controller runs (a running one deletes what the API asks, `ControllerLoop`):
    the database's controller lease is taken for it (`LeaseHeld`, naming the holder, when a controller
    runs there), so none of its trials can be alive. False: no such search."""
    from quanta.db.lease import ControllerLease
    from quanta.db.store import Store

    lease = ControllerLease(db)
    lease.acquire()
    try:
        store = Store(db)
        if store.search(search_id) is None:
            return False
        store.delete_search(search_id)
    finally:
        lease.release()
    shutil.rmtree(Path(workdir) / f"search-{search_id}", ignore_errors=True)
    return True


def stored_pareto(db: str, search_id: int) -> dict[str, Any] | None:
    """The Pareto view of search `search_id` of `db` (`quanta.db.pareto_view.pareto_out`, without its
    points) as the API answers it, read from the stored reports; None: no such search. Raises
    `FileNotFoundError` for a SQLite path with no database (none is created)."""
    from quanta.db.pareto_view import pareto_out
    from quanta.db.store import Store

    if db.startswith("sqlite:///") and not Path(db.removeprefix("sqlite:///")).is_file():
        raise FileNotFoundError(f"no database at {db}")
    out = pareto_out(Store(db), search_id, max_points=0)
    return None if out is None else out.model_dump()


def settle_interrupted(ctl: Controller, timeout_s: float = 10.0) -> None:
    """After an interrupt stopped a search: let its trials write their checkpoints and end, and record it
    (`Controller.settle`) for at most `timeout_s`; a second interrupt cuts the wait short."""
    try:
        ctl.settle(timeout_s)
    except KeyboardInterrupt:
        log.warning("interrupted again: trials that have not written their checkpoint yet go on from an older one")


def _run_local(
    db: str,
    devices: list[Device],
    workdir: str | Path,
    lease: ControllerLease | None,
    template: TemplateStart | None,
    on_step: Callable[[SearchProgress], None] | None,
    spec: SearchSpec,
    start: Callable[[Controller, Store], int],
) -> dict[str, Any]:
    """A controller on `devices` over `db` (lease taken here when None), trials of `spec`'s trainable
    warmed (a module that fails to import: `SpecError`), and `start(ctl, store)` giving the search it
    drives to its end (see `run_search`)."""
    from quanta.controller import Controller, ControllerOptions
    from quanta.db.lease import ControllerLease
    from quanta.db.store import Store
    from quanta.db.summary import search_result
    from quanta.executor.runtime.local import LocalRuntime
    from quanta.spec import SpecError

    workdir = Path(workdir)
    own_lease = lease is None
    if lease is None:
        lease = ControllerLease(db)
        lease.acquire()
    try:
        # The controller binds itself as the runtime's launcher before any trial starts.
        runtime = LocalRuntime(devices, warm_modules=[spec.module], template=template)
        try:  # before any trial: a module that fails to import (a missing package) fails them all
            problem = runtime.import_problem(spec.module)
        except BaseException:
            runtime.close()
            raise
        if problem is not None:
            runtime.close()
            raise SpecError([("trainable", problem.sentence())], spec.name)
        store = Store(db)
        ctl = Controller(store, runtime, ControllerOptions(workdir=workdir))
        try:
            search_id = start(ctl, store)
        except BaseException:
            ctl.close()
            raise
        s = ctl.search(search_id)
        assert s is not None
        loop = ControllerLoop(ctl, store, workdir, lease=lease, retry_failed_ticks=False)

        def step() -> None:
            if on_step is None:
                return
            busy = {d for r in runtime.residency().values() if r.running for d in r.devices}
            on_step(
                SearchProgress(
                    search_id=search_id,
                    name=s.spec.name,
                    metric=s.spec.metric.name,
                    done=s.counts.evaluated,
                    counts=s.counts,
                    max_trials=s.spec.budget.max_trials,
                    best=s.best,
                    reached=s.reached_at is not None,
                    busy_devices=len(busy),
                    devices=len(devices),
                )
            )

        try:
            loop.run(until=lambda: s.status != SearchStatus.RUNNING, on_step=step)
            ctl.settle()
            step()  # the last figures: the bar ends at what the result says
        except KeyboardInterrupt:
            ctl.stop_search(search_id, SearchStatus.STOPPED, "interrupted")
            settle_interrupted(ctl)  # its trials checkpoint as they stop: a resume loses no work
            raise
        finally:
            ctl.close()
        result = search_result(store, search_id)
        result["devices"] = [d.id for d in devices]
        result["db"] = db
        return result
    finally:
        if own_lease:
            lease.release()
