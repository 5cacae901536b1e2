"""`run(spec)`: a search run in this Python process, on this machine's devices, until it ends, as
Optuna's `study.optimize` runs one in a notebook: no server, no shell. It returns the result (what
`quanta run --output` writes) and the trials as a pandas DataFrame.

    from quanta.sdk import run

    result, trials = run("spec.yaml", devices="cpu:2")
    result["best_params"], result["best_metric"]
    trials.sort_values("best_metric").tail()
    result, trials = resume(result["search_id"], trials=20)   # go on with 20 more trials
    front = pareto(result["search_id"])                        # the Pareto front, one row per point

It drives the same controller as `quanta run` (`quanta.stored_search.run_search`): trials are processes
forked from a pre-warmed template, so the trainable must be importable by module name (a `.py` file in
the working directory, beside the spec file or on `sys.path`, or named by its path relative to the
spec: not a function defined in a notebook cell). The DataFrame needs the
`notebook` extra (pandas): without it `run` refuses before anything starts.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from quanta.sdk.notebook import ProgressKind, make_bar, pareto_frame, progress_kind, trials_frame
from quanta.spec import SearchSpec, SpecError, load_spec, parse_spec, place_locally

NO_PANDAS = "quanta.sdk.run returns the trials as a pandas DataFrame: pip install 'quanta[notebook]' (or pandas)"


class LocalRun(NamedTuple):
    """What `run` returns: `result` (search id, status, best params and metric, whether and when the target
    was reached, every trial: the JSON `quanta run --output` writes) and `trials` (one row per trial,
    parameters flattened to `params.<name>` columns)."""

    result: dict[str, Any]
    trials: Any  # a pandas DataFrame (pandas is optional, so not named in the annotation)


def as_spec(spec: SearchSpec | Mapping[str, Any] | str | Path) -> SearchSpec:
    """A validated spec from a `SearchSpec`, a mapping of fields, a path to a .yaml/.json file, or the
    YAML text itself (a string with a line break). Raises `SpecError` naming each bad field."""
    if isinstance(spec, SearchSpec):
        return spec
    if isinstance(spec, Mapping):
        return parse_spec(spec)
    if isinstance(spec, str) and "\n" in spec:
        return parse_spec(spec, origin="spec")
    return load_spec(Path(spec))


def run(
    spec: SearchSpec | Mapping[str, Any] | str | Path,
    *,
    devices: str = "auto",
    db: str = "sqlite:///quanta.db",
    workdir: str | Path | None = None,
    progress: bool | ProgressKind | None = None,
) -> LocalRun:
    """Run `spec` (see `as_spec`) on this machine's `devices` (`cpu:N`, `cuda:0,1`, `cuda:all`, `auto`)
    until its target is reached or its budget is spent, and return `LocalRun(result, trials)`.

    The search is stored in `db` (SQLite by default, beside the notebook; `postgresql://...` works) and
    its checkpoints and trial logs go under `workdir`, as with `quanta run` (None: a folder of the
    database's own under `.quanta/`; a workdir another database claimed is refused with `ValueError`).
    `progress`: None draws a bar where one can be seen (Jupyter's in a notebook, rich's in a terminal),
    False none.

    Everything is checked before anything starts or is stored: pandas (ImportError naming the extra), the
    spec (`SpecError` naming each bad field, its trainable when its module or function cannot be found,
    or a tracker whose library is not installed), the devices (`ValueError`), and the database
    (`RuntimeError` naming the controller that already runs on it). Interrupted (Ctrl-C, Jupyter's stop
    button), the search is stopped, its trials write their checkpoints and end, and KeyboardInterrupt
    goes on up (`resume` goes on with it)."""
    if importlib.util.find_spec("pandas") is None:
        raise ImportError(NO_PANDAS)
    from quanta.devices import parse_devices
    from quanta.stored_search import run_search
    from quanta.workdir import claim_workdir, workdir_for

    # Trials are forked from a template that imports the trainable by module name from this process's
    # sys.path (absolute entries only): the working directory, where a notebook's modules sit, goes on it
    # as `quanta run` puts it on its own.
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    checked = as_spec(spec)
    # A spec file's trainable may sit beside it or be named by its path relative to it; a spec given as
    # data is read as if from a file in the working directory.
    from_file = isinstance(spec, str | Path) and "\n" not in str(spec)
    checked = place_locally(checked, Path(str(spec)).parent if from_file else Path(here))
    problem = checked.tracking_problem()
    if problem is not None:
        raise SpecError([("tracking", problem)], checked.name)
    devs = parse_devices(devices)
    work = workdir_for(db, workdir)
    claim_workdir(work, db)  # WorkdirTaken (a ValueError) when another database's

    kind = progress_kind(progress)
    bar = make_bar(kind, checked.name) if kind is not None else None

    def show(p: Any) -> None:
        if bar is None:
            return
        text = f"best {p.metric}={p.best:.4g}" if p.best is not None else "best -"
        if p.reached:
            text += " · target reached"
        bar.update(p.done, p.max_trials, f"{text} · {p.counts.text()} · devices busy {p.busy_devices}/{p.devices}")

    try:
        result = run_search(checked, devs, db=db, workdir=work, on_step=show)
    finally:
        if bar is not None:
            bar.close()
    return LocalRun(result, trials_frame(result["trials"]))


def resume(
    search_id: int,
    *,
    trials: int = 0,
    seconds: float = 0.0,
    devices: str = "auto",
    db: str = "sqlite:///quanta.db",
    workdir: str | Path | None = None,
    progress: bool | ProgressKind | None = None,
) -> LocalRun:
    """Go on with search `search_id` of `db` (stopped, interrupted, completed) in this process until it
    ends, its budget raised by `trials` and `seconds`, and return `LocalRun(result, trials)` as `run` does.
    Its searcher goes on from every trial so far (only new configurations) and the trials its end stopped
    go on from their checkpoints under `workdir` (the one it ran with; None: the database's own, as `run`
    uses). `KeyError`: no such search;
    `quanta.db.errors.Conflict` or `BudgetError`, naming why, when it cannot be resumed (nothing changes
    then); `ImportError` without pandas, before anything starts."""
    if importlib.util.find_spec("pandas") is None:
        raise ImportError(NO_PANDAS)
    from quanta.devices import parse_devices
    from quanta.stored_search import resume_search
    from quanta.workdir import claim_workdir, workdir_for

    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    devs = parse_devices(devices)
    work = workdir_for(db, workdir)
    claim_workdir(work, db)  # WorkdirTaken (a ValueError) when another database's
    kind = progress_kind(progress)
    bar = make_bar(kind, f"search {search_id}") if kind is not None else None

    def show(p: Any) -> None:
        if bar is not None:
            text = f"best {p.metric}={p.best:.4g}" if p.best is not None else "best -"
            bar.update(p.done, p.max_trials, f"{text} · {p.counts.text()} · devices busy {p.busy_devices}/{p.devices}")

    try:
        result = resume_search(
            search_id, devs, db=db, workdir=work, more_trials=trials, more_seconds=seconds, on_step=show
        )
    finally:
        if bar is not None:
            bar.close()
    return LocalRun(result, trials_frame(result["trials"]))


def pareto(search_id: int, *, db: str = "sqlite:///quanta.db") -> Any:
    """The Pareto front of search `search_id` of `db` as a pandas DataFrame, as `Client.search(id).pareto()`
    returns it from a server (one row per front point: trial, number, step, seconds, status, each objective,
    `params.<name>`), read from the stored reports. `KeyError`: no such search; `FileNotFoundError`: no
    database at a SQLite path (none is created); ImportError without pandas."""
    if importlib.util.find_spec("pandas") is None:
        raise ImportError(NO_PANDAS.replace("quanta.sdk.run returns the trials", "quanta.sdk.pareto returns the front"))
    from quanta.stored_search import stored_pareto

    out = stored_pareto(db, search_id)
    if out is None:
        raise KeyError(f"search {search_id} not found in {db}")
    return pareto_frame(out)
