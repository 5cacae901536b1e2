"""Restart loading: one stored search's working state rebuilt from the store, for `SearchBook`.

A controller keeps nothing of a search that it did not write to the store. When one starts over a
database holding running or paused searches (`SearchBook.load`), or takes a search up again on a
resume (`SearchBook.reopen`), each search is rebuilt here from its rows alone, in two steps around
the book's activation (which builds its searcher):

- `read_stored_search(store, row)`: from the search's row, its spec (`row.spec`, parsed by this
  version: a spec it refuses raises, and the book fails that search alone) and its trial rows; from each
  trial's stored reports its curve (the objective by step, a step reported by several attempts taken
  from the latest) and, for a search with several objectives or constraints, its points (read again by
  a `PointReader`, which holds the values carried forward). From these: the searcher's history (a
  `HistoryItem` per proposal of its own, forks being none) and the warm-start items the search started
  with (as stored then, not as those earlier searches are now).
- `restore_search(s, stored, resident, store)`: the activated `SearchState` `s` (its searcher rebuilt
  from that history) takes the stored status, trial numbering (`created`, `forked`), best trial and
  value, time the target was reached, `waiting` and the time it spent ended; each trial becomes a
  `TrialState` with its stored progress, its curve and points (a fork's prefixed by its parent's before
  the fork step), and the search's Pareto front is rebuilt from every feasible, finite point; its health
  (`SearchHealth.restored`) from the trials that ended, in the order they ended. A trial stored
  `running` that the runtime no longer holds (not in `resident`: its process died with the previous
  controller) is queued again to go on from its checkpoint, one more retry counted and stored (never a
  failure: it was not the trial's fault); one the runtime still holds (a node agent outlives a
  controller) stays running. A fork whose parent's state is still being taken (no `fork_step`) is the
  fork desk's (`quanta.controller.forks`) and is left out. The trial states are returned, parents before
  their forks, for the book to track.

So a restarted controller makes the decisions the one before it would have made: the searcher, asked
the next number, proposes what the original would have (`Searcher.restore`), the policy and the judge
see the same curves, points and front, the health check counts the same failures in a row, a target
already reached stays reached, and new trials continue the search's numbering.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from quanta.controller.health import SearchHealth
from quanta.controller.state import SearchState, TrialState, objective_loss
from quanta.db.models import SearchRow, TrialRow
from quanta.db.protocol import ControllerStore
from quanta.db.reports import latest_per_step
from quanta.search.pareto import Point, PointReader
from quanta.search.searcher import HistoryItem
from quanta.spec import SearchSpec, spec_from_stored
from quanta.status import SearchStatus, TrialStatus


@dataclass(frozen=True)
class StoredSearch:
    """What the store holds of one search, read for loading it (see the module doc)."""

    row: SearchRow
    spec: SearchSpec
    trials: list[TrialRow]  # by number
    curves: dict[int, list[tuple[int, float]]]  # trial number -> (step, objective), a step's latest attempt
    readers: dict[int, PointReader]  # trial number -> the reader that read its points (several objectives)
    points: dict[int, list[Point]]  # trial number -> its points (several objectives)
    history: list[HistoryItem]  # the searcher's trials: forks left out
    warm: list[dict[str, Any]] | None  # the warm-start items as stored when the search started


def read_stored_search(store: ControllerStore, row: SearchRow) -> StoredSearch:
    """Search `row`'s spec, trials, their curves and points, its searcher's history and warm-start items,
    read from `store` (see the module doc)."""
    assert row.id is not None
    spec = spec_from_stored(row.spec)
    trials = store.trials(row.id)
    curves: dict[int, list[tuple[int, float]]] = {}  # by trial number (unique in a search)
    # A search with several objectives or constraints: each trial's points read again from its reports,
    # with the reader that read them (it holds the values carried forward).
    readers: dict[int, PointReader] = {}
    trial_points: dict[int, list[Point]] = {}
    for t in trials:
        assert t.id is not None
        rows = store.reports(t.id)
        points = [(r.step, r.attempt, r.objective) for r in rows if r.objective is not None]
        curves[t.number] = latest_per_step(points)  # a step run again: by its latest attempt
        if spec.pareto:
            reader = readers[t.number] = PointReader(spec.objectives, spec.bounds)
            read = (reader.read(step, m) for step, m in latest_per_step((r.step, r.attempt, r.metrics) for r in rows))
            trial_points[t.number] = [p for p in read if p is not None]
    history = [  # the searcher's trials: a fork is none of its proposals
        HistoryItem(
            t.number,
            t.vals,
            objective_loss(spec, t.metric) if TrialStatus(t.status).final else None,
            t.status != TrialStatus.FAILED,
            tuple((step, spec.metric.loss(v)) for step, v in curves[t.number]),
            tuple(trial_points.get(t.number, ())),
        )
        for t in trials
        if t.parent_id is None
    ]
    # The warm-start trials as they were when the search started (not as those searches are now).
    warm = store.warm_start(row.id) if spec.search.warm_start_from else None
    return StoredSearch(row, spec, trials, curves, readers, trial_points, history, warm)


def restore_search(
    s: SearchState, stored: StoredSearch, resident: Container[int], store: ControllerStore
) -> list[TrialState]:
    """Give the activated search `s` what `stored` holds, and return its trials' states for the book to
    track; `resident`: the trials the runtime holds now; lost running trials are queued again in `store`
    (see the module doc)."""
    row, spec, trials = stored.row, stored.spec, stored.trials
    s.status = SearchStatus(row.status)
    s.created = max([t.number + 1 for t in trials], default=0)
    s.forked = sum(1 for t in trials if t.parent_id is not None)
    s.best_trial, s.best, s.reached_at = row.best_trial_id, row.best_metric, row.reached_at
    s.waiting = row.waiting
    s.idle_seconds = row.idle_seconds
    loaded: dict[int, TrialState] = {}
    for t in trials:  # by number: a fork's parent comes before it
        assert t.id is not None
        if t.parent_id is not None and t.fork_step is None and not TrialStatus(t.status).final:
            continue  # its parent's state is still being taken: the fork desk holds it
        ts = TrialState(t.id, s.id, t.number, t.params, t.vals, t.created_at, TrialStatus(t.status))
        ts.steps, ts.metric, ts.best, ts.retries = t.steps, t.metric, t.best_metric, t.retries
        ts.device_seconds_base = ts.device_seconds = t.device_seconds
        ts.started_at, ts.finished_at, ts.error, ts.reason = t.started_at, t.finished_at, t.error, t.reason
        ts.parent_id, ts.fork_step, ts.own_max_steps = t.parent_id, t.fork_step, t.max_steps
        ts.curve = stored.curves[t.number]
        parent = loaded.get(t.parent_id) if t.parent_id is not None else None
        if parent is not None and t.fork_step is not None:  # its parent's curve up to the fork is its own
            ts.curve = [p for p in parent.curve if p[0] < t.fork_step] + ts.curve
        if spec.pareto:
            ts.points, ts.reader = stored.points[t.number], stored.readers[t.number]
            if parent is not None and t.fork_step is not None:  # and its points up to the fork
                ts.points = [p for p in parent.points if p[0] < t.fork_step] + ts.points
            for _step, losses, violation in ts.points:
                if violation == 0.0 and all(math.isfinite(v) for v in losses):
                    s.add_to_front(losses)
        ts.resume = t.checkpoint_step is not None
        if ts.status == TrialStatus.RUNNING and t.id not in resident:
            # Its process was lost with the previous controller: a retry (counted, and its reports are
            # a new attempt's), never a failure (it was not the trial's fault).
            ts.status, ts.resume = TrialStatus.QUEUED, True
            ts.retries += 1
            store.update_trial(t.id, status=TrialStatus.QUEUED, retries=ts.retries)
        loaded[t.id] = ts
    ended = sorted((t for t in trials if TrialStatus(t.status).final), key=lambda t: (t.finished_at or 0, t.id))
    s.health = SearchHealth.restored(
        metric_seen=any(stored.curves.values()),
        warned=row.warning is not None,
        ended=[(t.id or 0, TrialStatus(t.status)) for t in ended],
    )
    return list(loaded.values())
