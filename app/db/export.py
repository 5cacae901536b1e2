"""A search's trials as a table to export: one row per trial, parameters flattened into columns.

`trial_table(store, search_id)` builds the `TrialTable` (None when there is no such search); `to_csv`,
`to_json` and `to_parquet` render it. Columns, in this order: `FIXED` (id, number, the trial it was
forked from and that trial's step then (empty for the searcher's own), status, the final and best value
of the objective, steps, device seconds, retries, why it ended, timestamps), then one
`params.<name>` column per parameter, nested parameters joined by dots (`params.optimizer.momentum`),
in the space's order. A search with several objectives or with constraints (`SearchSpec.pareto`) has,
between the two, `objectives.<name>` (each objective at the trial's last point: its last report of an
objective, values carried forward), `violation` (that point's excess over the constraints: 0 feasible,
empty while a bounded value is unknown or non-finite), `feasible` and `on_front` (whether any of its
points is on the search's Pareto front), read from the stored reports as `quanta.db.pareto_view` reads
them; a single-objective search's columns are as they always were. The parameter columns come from the
spec's space, so a search without trials exports a header and no rows (a parameter found only in trials,
e.g. from an older spec, is appended).

CSV: empty cells for missing values, floats written exactly (Python's repr round-trips), text quoted and,
where a spreadsheet would run it as a formula, prefixed with `'` (`formula_safe`, OWASP's advice). JSON:
``{"search_id", "metric", "columns", "trials": [{column: value}, ...]}``. Parquet needs pyarrow
(`pip install 'quanta[notebook]'`; `ExportError` says so when it is missing); a parameter column whose
values have several types (a choice of 8 and "auto") is written as text there.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from quanta.db.models import TrialRow
from quanta.db.pareto_view import TrialOutcome, trial_outcomes
from quanta.db.protocol import ControllerStore
from quanta.db.public.readable import finite, parsed_spec
from quanta.search.space import is_dimension

Format = Literal["csv", "json", "parquet"]
FORMATS: tuple[Format, ...] = ("csv", "json", "parquet")
MEDIA_TYPES: dict[str, str] = {
    "csv": "text/csv",
    "json": "application/json",
    "parquet": "application/vnd.apache.parquet",
}

FIXED = (
    "trial_id",
    "number",
    "parent_id",
    "fork_step",
    "status",
    "final_metric",
    "best_metric",
    "steps",
    "device_seconds",
    "retries",
    "reason",
    "error",
    "created_at",
    "started_at",
    "finished_at",
)
PARAMS = "params."
OBJECTIVES = "objectives."
FEASIBILITY = ("violation", "feasible", "on_front")


class ExportError(RuntimeError):
    """An export cannot be written (a format whose library is not installed)."""


@dataclass(frozen=True)
class TrialTable:
    search_id: int
    metric: str | None  # the objective's name: what final_metric and best_metric hold
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]


def name_part(key: Any) -> str:
    """One key as part of a flattened name: a '.' in it (a space stored before names with dots were
    refused) is escaped as '\\.' and a backslash as '\\\\', so `{"a.b": 1}` gives `a\\.b` and never the
    name of `{"a": {"b": 1}}`."""
    text = str(key)
    return text.replace("\\", "\\\\").replace(".", "\\.") if "." in text or "\\" in text else text


def space_columns(space: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The flattened parameter names a configuration of `space` has (without the `params.` prefix), in
    the space's order: a nested space or a choice among nested spaces contributes its own names under
    its key (`optimizer.name`, `optimizer.momentum`), everything else its key. Linear in the names."""
    out: dict[str, None] = {}  # an ordered set: first seen first
    _space_columns(space, prefix, out)
    return list(out)


def _space_columns(space: Mapping[str, Any], prefix: str, out: dict[str, None]) -> None:
    for key, node in space.items():
        name = f"{prefix}{name_part(key)}"
        if is_dimension(node):
            kind, args = next(iter(node.items()))
            options = args if kind == "choice" else []
            nested = [o for o in options if isinstance(o, Mapping) and not is_dimension(o)]
            if len(nested) < len(options) or not nested:
                out.setdefault(name)  # some option is a plain value
            for option in nested:
                _space_columns(option, f"{name}.", out)
        elif isinstance(node, Mapping):
            _space_columns(node, f"{name}.", out)
        else:
            out.setdefault(name)


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"optimizer": {"name": "sgd", "momentum": 0.9}}` -> `{"optimizer.name": "sgd", "optimizer.momentum": 0.9}`
    (keys as `name_part` writes them)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{name_part(key)}."))
        else:
            out[f"{prefix}{name_part(key)}"] = value
    return out


def _row(t: TrialRow) -> dict[str, Any]:
    row: dict[str, Any] = {
        "trial_id": t.id,
        "number": t.number,
        "parent_id": t.parent_id,
        "fork_step": t.fork_step,
        "status": str(t.status),
        "final_metric": finite(t.metric),
        "best_metric": finite(t.best_metric),
        "steps": t.steps,
        "device_seconds": round(t.device_seconds, 3),
        "retries": t.retries,
        "reason": t.reason,
        "error": t.error,
        "created_at": t.created_at,
        "started_at": t.started_at,
        "finished_at": t.finished_at,
    }
    row.update({PARAMS + k: v for k, v in flatten(t.params).items()})
    return row


def _outcome_cells(names: list[str], outcome: TrialOutcome | None) -> dict[str, Any]:
    """The objective and feasibility columns of one trial (all empty for a trial without a point)."""
    if outcome is None:
        return {**{OBJECTIVES + n: None for n in names}, "violation": None, "feasible": None, "on_front": None}
    return {
        **{OBJECTIVES + n: outcome.values.get(n) for n in names},
        "violation": outcome.violation,
        "feasible": outcome.violation == 0.0,
        "on_front": outcome.on_front,
    }


def trial_table(store: ControllerStore, search_id: int) -> TrialTable | None:
    """Every trial of the search, by number (None when the search does not exist)."""
    search = store.search(search_id)
    if search is None:
        return None
    spec = parsed_spec(search)
    names = space_columns(spec.space) if spec is not None else []
    trials = store.trials(search_id)
    rows = [_row(t) for t in trials]
    outcome_columns: list[str] = []
    if spec is not None and spec.pareto:
        objectives = [o.name for o in spec.objectives]
        outcomes = trial_outcomes(spec, store.search_reports(search_id))
        for t, r in zip(trials, rows, strict=True):
            r.update(_outcome_cells(objectives, outcomes.get(t.id) if t.id is not None else None))
        outcome_columns = [*(OBJECTIVES + n for n in objectives), *FEASIBILITY]
    extra = sorted({k.removeprefix(PARAMS) for r in rows for k in r if k.startswith(PARAMS)} - set(names))
    columns = (*FIXED, *outcome_columns, *(PARAMS + n for n in [*names, *extra]))
    full = tuple({c: r.get(c) for c in columns} for r in rows)
    return TrialTable(search_id, spec.metric.name if spec else None, columns, full)


def to_csv(table: TrialTable) -> str:
    """The table as CSV text with a header line (missing values are empty cells). As OWASP recommends for
    a file a spreadsheet may open: every text cell of the rows is quoted (numbers are not), and text that
    would run as a formula is prefixed with `'` (`formula_safe`). The header's names start with a fixed
    column's name or `params.`, never with a formula character: written plain."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([formula_safe(c) for c in table.columns])
    writer = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    for row in table.rows:
        writer.writerow(["" if row[c] is None else _cell(row[c]) for c in table.columns])
    return buf.getvalue()


# What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection"): these first characters,
# and their full-width forms, which some spreadsheets fold to them.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def formula_safe(text: str) -> str:
    """`text` as OWASP recommends for a CSV cell a spreadsheet will open: prefixed with a single quote
    when it starts with a formula character (`=cmd|' /C calc'!A0` -> `'=cmd|' /C calc'!A0`), so it is
    shown as text and never run. Numbers are left to be written as numbers (a negative one is no
    formula)."""
    return "'" + text if text.startswith(FORMULA_START) else text


def _cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return formula_safe(json.dumps(value))
    return formula_safe(value) if isinstance(value, str) else value


def to_json(table: TrialTable) -> str:
    return json.dumps(
        {
            "search_id": table.search_id,
            "metric": table.metric,
            "columns": list(table.columns),
            "trials": list(table.rows),
        },
        indent=1,
    )


def _column_values(table: TrialTable, column: str) -> list[Any]:
    """One column's values, made one type where they are not (as text), as Parquet needs."""
    values = [row[column] for row in table.rows]
    kinds = {
        "number" if isinstance(v, int | float) and not isinstance(v, bool) else type(v).__name__
        for v in values
        if v is not None
    }
    if len(kinds) > 1 or kinds & {"list", "dict"}:
        return [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values]
    if kinds == {"number"} and any(isinstance(v, float) for v in values):
        return [None if v is None else float(v) for v in values]
    return values


def to_parquet(table: TrialTable) -> bytes:
    """The table as a Parquet file's bytes. Raises `ExportError` when pyarrow is not installed."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("the parquet format needs pyarrow: pip install 'quanta[notebook]' (or pyarrow)") from None
    types = {
        "trial_id": pa.int64(),
        "number": pa.int64(),
        "steps": pa.int64(),
        "retries": pa.int64(),
        "status": pa.string(),
    }
    for c in ("final_metric", "best_metric", "device_seconds", "created_at", "started_at", "finished_at"):
        types[c] = pa.float64()
    for c in ("reason", "error"):
        types[c] = pa.string()
    for c in table.columns:
        if c.startswith(OBJECTIVES) or c == "violation":
            types[c] = pa.float64()
        elif c in ("feasible", "on_front"):
            types[c] = pa.bool_()
    arrays = {}
    for column in table.columns:
        values = _column_values(table, column)
        kind = types.get(column)
        if kind is None and all(v is None for v in values):
            kind = pa.string()  # an empty (or all-missing) parameter column: typed, so readers see a column
        arrays[column] = pa.array(values, type=kind)
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table(arrays), buf)
    return bytes(buf.getvalue().to_pybytes())


def render(table: TrialTable, fmt: Format) -> bytes:
    """The table in format `fmt` as bytes (UTF-8 text for csv and json)."""
    if fmt == "csv":
        return to_csv(table).encode()
    if fmt == "json":
        return to_json(table).encode()
    if fmt == "parquet":
        return to_parquet(table)
    raise ValueError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
