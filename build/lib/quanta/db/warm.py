"""Warm start from earlier searches (`search.warm_start_from` in a spec): which stored trials seed a new
search's searcher, and the checks that make them fit.

- `check_warm_start(store, spec)` refuses what cannot be used: an id no search has (`WarmStartError`
  with `missing=True`: the API answers 404, the CLI an error naming it) or a search whose space or
  metric differs (`missing=False`: 422, naming the first parameter where the spaces differ).
- `warm_items(store, spec)` checks, then returns the finished trials of those searches, in the order
  the spec names the searches and, within one, by trial number, as JSON-ready dicts (their final loss
  in the new search's orientation, whether they failed, and their reported curve).

The controller stores those dicts with the search when it starts it (`save_warm_start`) and rebuilds the
searcher from the stored copy after a restart (`items_from_json`), so a restart replays exactly the same
warm history even when the earlier searches were deleted or changed since.
"""

from __future__ import annotations

from typing import Any

from quanta.db.protocol import ControllerStore
from quanta.search.searcher import HistoryItem
from quanta.search.space import space_difference
from quanta.spec import SearchSpec, SpecError, spec_from_stored
from quanta.status import TrialStatus


class WarmStartError(ValueError):
    """A search named in `search.warm_start_from` cannot seed this one. `field` is the spec path
    (``search.warm_start_from[0]``), `search_id` the earlier search, `missing` True when it does not
    exist (404), False when it does not fit (422)."""

    def __init__(self, field: str, search_id: int, reason: str, *, missing: bool):
        self.field = field
        self.search_id = search_id
        self.reason = reason
        self.missing = missing
        super().__init__(f"{field}: {reason}")


def _source(store: ControllerStore, spec: SearchSpec, i: int, search_id: int) -> SearchSpec:
    field = f"search.warm_start_from[{i}]"
    row = store.search(search_id)
    if row is None:
        raise WarmStartError(field, search_id, f"search {search_id} does not exist", missing=True)
    try:
        theirs = spec_from_stored(row.spec)
    except SpecError as exc:
        raise WarmStartError(
            field, search_id, f"search {search_id}'s spec does not parse: {exc}", missing=False
        ) from None
    diff = space_difference(spec.space, theirs.space)
    if diff is not None:
        raise WarmStartError(field, search_id, f"search {search_id} has another space: {diff}", missing=False)
    if (theirs.metric.name, theirs.metric.goal) != (spec.metric.name, spec.metric.goal):
        raise WarmStartError(
            field,
            search_id,
            f"search {search_id} {theirs.metric.goal}s '{theirs.metric.name}', this one "
            f"{spec.metric.goal}s '{spec.metric.name}' (metric)",
            missing=False,
        )
    return theirs


def check_warm_start(store: ControllerStore, spec: SearchSpec) -> None:
    """Raise `WarmStartError` for the first search of `search.warm_start_from` that is missing or does
    not fit; nothing is read beyond the searches' rows."""
    for i, search_id in enumerate(spec.search.warm_start_from):
        _source(store, spec, i, search_id)


def warm_items(store: ControllerStore, spec: SearchSpec) -> list[dict[str, Any]]:
    """The finished trials of the spec's warm-start searches as JSON-ready dicts (see the module's
    docstring); [] when it names none. Raises `WarmStartError` as `check_warm_start` does."""
    items: list[dict[str, Any]] = []
    for i, search_id in enumerate(spec.search.warm_start_from):
        _source(store, spec, i, search_id)
        curves: dict[int, list[list[float]]] = {}
        for r in store.search_reports(search_id):
            if r.objective is not None:
                curves.setdefault(r.trial_id, []).append([r.step, spec.metric.loss(r.objective)])
        for t in store.trials(search_id):
            status = TrialStatus(t.status)
            if not status.final:
                continue  # still running there: its result is not known
            ok = status != TrialStatus.FAILED and t.metric is not None
            items.append(
                {
                    "search_id": search_id,
                    "number": t.number,
                    "vals": t.vals,
                    "loss": spec.metric.loss(t.metric) if ok and t.metric is not None else None,
                    "ok": ok,
                    "curve": curves.get(t.id or 0, []),
                }
            )
    return items


def items_from_json(items: list[dict[str, Any]]) -> list[HistoryItem]:
    """The searcher's `HistoryItem`s of stored warm-start dicts (numbered by position)."""
    return [
        HistoryItem(
            number=k,
            vals={label: list(vs) for label, vs in d["vals"].items()},
            loss=None if d["loss"] is None else float(d["loss"]),
            ok=bool(d["ok"]),
            curve=tuple((int(step), float(loss)) for step, loss in d["curve"]),
        )
        for k, d in enumerate(items)
    ]
