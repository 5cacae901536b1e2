"""The rules of the `report` table (see `ReportRow`), shared by the stores that keep it (`Store`,
`MemoryStore`) and the readers that show curves: one row per (trial, step, attempt), a report delivered
again merged into its row, and each step shown once, by its latest attempt."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from quanta.db.models import ReportRow

Key = tuple[int, int, int]  # (trial id, step, attempt)
T = TypeVar("T")


def report_key(row: ReportRow) -> Key:
    return (row.trial_id, row.step, row.attempt)


def merge_report(into: ReportRow, later: ReportRow) -> None:
    """Fold `later`, a report of the same (trial, step, attempt), into the row `into`: the metrics of
    both, `later`'s values winning where both have one (a report delivered again changes nothing). The
    objective is `later`'s when it carries one; a metric `later` reports finite is no longer flagged
    non-finite. `into` keeps its id and its time (`at`: when the step was first reported)."""
    into.metrics = {**into.metrics, **later.metrics}  # a new dict: SQLAlchemy sees the change
    if later.objective is not None:
        into.objective = later.objective
    flags = {k: v for k, v in (into.non_finite or {}).items() if k not in later.metrics}
    flags.update(later.non_finite or {})
    into.non_finite = flags or None


def fold_batch(rows: Iterable[ReportRow]) -> dict[Key, ReportRow]:
    """The rows of one batch by key, the ones sharing a key merged in order (first row kept)."""
    out: dict[Key, ReportRow] = {}
    for row in rows:
        key = report_key(row)
        if key in out:
            merge_report(out[key], row)
        else:
            out[key] = row
    return out


def latest_per_step(points: Iterable[tuple[int, int, T]]) -> list[tuple[int, T]]:
    """(step, value) per step, from (step, attempt, value) triples in any order: each step once, by its
    latest attempt (a step run again after a restart shows the run the trial continued from), in step
    order."""
    best: dict[int, tuple[int, T]] = {}
    for step, attempt, value in points:
        held = best.get(step)
        if held is None or attempt >= held[0]:
            best[step] = (attempt, value)
    return [(step, best[step][1]) for step in sorted(best)]
