"""Ask/tell searchers over HyperOpt: which configuration a trial tries next.

HyperOpt is built around `fmin`, which owns the loop and calls the objective. Quanta owns the loop
(trials run for a long time, in parallel, are told in any order and outlive the process), so the
searchers here drive `hyperopt.tpe.suggest` / `hyperopt.rand.suggest` directly, one trial at a time,
against a `Trials` object whose documents they keep themselves:

- `ask(number)` suggests the configuration of trial `number` and records it as a *running* document:
  HyperOpt counts it as pending (loss +inf, a pessimistic "constant liar"), which spreads parallel asks,
  and it counts toward `n_startup`.
- `tell(number, loss, ok)` completes (or fails, or re-opens) that document. Tells may come in any order
  and a second tell overwrites the first.
- Each ask uses a seed derived from (search seed, trial number), so the first `n_startup` suggestions of
  TPE, and every suggestion of random search, depend on nothing but the seed and the trial number.
- `restore(space, seed, n_startup, history)` rebuilds a searcher from the stored `HistoryItem`s (the
  database is the truth); the rebuilt searcher asks exactly what the original would have asked next.
- Warm start: `points` (flat `vals` records) are what trials 0, 1, ... try before anything is suggested;
  `warm` (earlier searches' finished trials, same space) are inserted as finished documents with negative
  tids before any ask, so they inform TPE (and count toward `n_startup`) but are never asked or told.
  Both are given again to `restore`, which then asks what the original would have asked.

Pure: no devices, no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np
from hyperopt import Trials, pyll, rand
from hyperopt.base import (
    JOB_STATE_DONE,
    JOB_STATE_RUNNING,
    JOB_VALID_STATES,
    STATUS_FAIL,
    STATUS_OK,
    STATUS_RUNNING,
    Domain,
    spec_from_misc,
)
from hyperopt.exceptions import BadSearchSpace
from hyperopt.pyll import Apply
from hyperopt.tpe import _default_gamma

from quanta.search.space import SpaceError, compile_space
from quanta.search.tpe import Posterior

__all__ = [
    "HistoryItem",
    "HyperOptSearcher",
    "RandomSearcher",
    "Searcher",
    "Suggestion",
    "ask_seed",
]


@dataclass(frozen=True)
class Suggestion:
    """What `ask` returns.

    `params` is the nested configuration the trainable receives (plain python values). `vals` is the
    searcher's flat record, ``{label: [value]}`` for the active labels only, JSON-serialisable: store it
    and hand it back in a `HistoryItem` to rebuild the searcher.
    """

    params: dict[str, Any]
    vals: dict[str, list[Any]]


@dataclass(frozen=True)
class HistoryItem:
    """One trial as the searcher needs to remember it."""

    number: int  # trial number within the search, 0, 1, 2, ...
    vals: dict[str, list[Any]]  # Suggestion.vals as stored
    loss: float | None  # None = still in flight (pending)
    ok: bool = True  # False = failed trial (HyperOpt STATUS_FAIL)
    # Every report of the objective as (step, loss), in report order: what a multi-fidelity searcher
    # learns from (others ignore it). Oriented like `loss`: smaller is better.
    curve: tuple[tuple[int, float], ...] = ()
    # A search with several objectives or constraints: every report as (step, losses, violation)
    # (`quanta.search.pareto.Point`), what `quanta.search.pareto_tpe.ParetoTPE` learns from (others ignore it).
    points: tuple[tuple[int, tuple[float, ...], float], ...] = ()


@runtime_checkable
class Searcher(Protocol):
    """Suggests configurations and learns from results, one trial at a time, in any order.

    `ask(number)` proposes trial `number`'s configuration; `tell(number, loss, ok)` gives its final
    result (loss None = in flight again); `observe(number, step, loss)` gives one intermediate report
    (a searcher that learns only from final results ignores it); `observe_point(number, step, losses,
    violation)` gives one report of a search with several objectives or constraints (a searcher that ranks
    by one objective ignores it).
    """

    def ask(self, number: int) -> Suggestion: ...

    def tell(self, number: int, loss: float | None, ok: bool = True) -> None: ...

    def observe(self, number: int, step: int, loss: float) -> None: ...

    def observe_point(self, number: int, step: int, losses: tuple[float, ...], violation: float) -> None: ...


def ask_seed(seed: int, number: int) -> int:
    """The seed of the ask for trial `number` of a search seeded with `seed` (a 32-bit integer)."""
    return int(np.random.SeedSequence([int(seed), int(number)]).generate_state(1)[0])


def _plain(value: Any) -> Any:
    """numpy scalars -> python scalars, recursively through dicts, lists and tuples."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _is_compiled(node: Any) -> bool:
    """True when `node` already holds HyperOpt expressions (a space passed through `compile_space`)."""
    if isinstance(node, Apply):
        return True
    if isinstance(node, Mapping):
        return any(_is_compiled(v) for v in node.values())
    if isinstance(node, list | tuple):
        return any(_is_compiled(v) for v in node)
    return False


def _check_number(number: Any) -> int:
    if isinstance(number, bool) or not isinstance(number, int | np.integer):
        raise TypeError(f"trial number must be an int, not {type(number).__name__}")
    if number < 0:
        raise ValueError(f"trial number must be >= 0, got {number}")
    return int(number)


class _TrialsSearcher:
    """Shared bookkeeping: one HyperOpt `Trials` document per asked trial, mutated in place on tell."""

    def __init__(
        self,
        space: Mapping[str, Any],
        seed: int,
        n_startup: int = 20,
        *,
        points: Sequence[Mapping[str, Sequence[Any]]] = (),
        warm: Sequence[HistoryItem] = (),
    ):
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if n_startup < 0:
            raise ValueError(f"n_startup must be >= 0, got {n_startup}")
        self.space = space
        self.seed = int(seed)
        self.n_startup = int(n_startup)
        self._hp_space = space if _is_compiled(space) else compile_space(space)
        # `params_of` is `hyperopt.space_eval` with the graph sorted here once rather than per call (a graph
        # sort per ask was 6 % of a long simulated search): the space's parameters in topological order.
        self._space_apply = pyll.as_apply(self._hp_space)
        self._param_nodes = [
            (node, node.arg["label"].eval())
            for node in pyll.toposort(self._space_apply)
            if node.name == "hyperopt_param"
        ]
        try:
            self._domain = Domain(_never_called, self._hp_space)
        except BadSearchSpace as exc:  # e.g. DuplicateLabel: a key with '/' colliding with a nested path
            raise SpaceError("space", f"HyperOpt rejects the space: {type(exc).__name__} {exc}") from None
        self._labels: tuple[str, ...] = tuple(self._domain.params)
        self._trials = Trials()
        self._docs: dict[int, dict[str, Any]] = {}  # number -> the document stored inside self._trials
        # Every document's tid in the order `self._trials.trials` holds them (warm ones first), its
        # position there, and whether the tids ascend (asks in number order: TPE's order is by tid).
        self._order: list[int] = []
        self._position: dict[int, int] = {}
        self._ascending = True
        self._told: dict[int, tuple[float | None, bool]] = {}
        self._curves: dict[int, list[tuple[int, float]]] = {}  # number -> reported (step, loss)
        # Configurations the first trials try (trial i asks points[i]), as flat `vals` records.
        self._points = [self._checked_vals(i, p) for i, p in enumerate(points)]
        # Earlier searches' trials (warm start): finished documents with negative tids -len(warm)..-1, so
        # TPE sees them as older than every trial of this search (its linear forgetting drops them first).
        self._warm_docs: dict[int, dict[str, Any]] = {}
        self._seed_warm(warm)

    # -- construction from history -------------------------------------------------------------------
    @classmethod
    def restore(
        cls,
        space: Mapping[str, Any],
        seed: int,
        n_startup: int,
        history: Sequence[HistoryItem],
        *,
        points: Sequence[Mapping[str, Sequence[Any]]] = (),
        warm: Sequence[HistoryItem] = (),
    ) -> Self:
        """Rebuild the searcher from stored history (asked trials, told or still pending), with the same
        `points` and `warm` history it was built with.

        The next `ask` of the rebuilt searcher equals what the original would have asked next.
        """
        return cls(space, seed, n_startup, points=points, warm=warm)._replay(history)

    def _seed_warm(self, warm: Sequence[HistoryItem]) -> None:
        """Insert earlier searches' trials as finished documents (loss, or failed; in-flight ones are
        skipped), in the order given. Only `restore`/the constructor call this, before any ask."""
        items = [w for w in warm if w.loss is not None or not w.ok]
        for k, item in enumerate(items):
            tid = k - len(items)
            vals = self._checked_vals(tid, item.vals)
            misc = {
                "tid": tid,
                "cmd": self._domain.cmd,
                "workdir": self._domain.workdir,
                "idxs": {label: ([tid] if label in vals else []) for label in self._labels},
                "vals": {label: list(vals.get(label, [])) for label in self._labels},
            }
            loss = item.loss
            if item.ok and loss is not None and not math.isnan(loss):
                result: dict[str, Any] = {"status": STATUS_OK, "loss": float(loss)}
            else:
                result = {"status": STATUS_FAIL}
            (doc,) = self._trials.new_trial_docs([tid], [None], [result], [misc])
            doc["state"] = JOB_STATE_DONE
            self._trials.insert_trial_docs([doc])
            self._warm_docs[tid] = self._trials._dynamic_trials[-1]
            self._append_order(tid)
            curve = [(int(s), float(v)) for s, v in item.curve if math.isfinite(v)]
            if curve:
                self._curves[tid] = curve
        self._trials.refresh()

    @property
    def warm_size(self) -> int:
        """How many earlier trials seed this searcher."""
        return len(self._warm_docs)

    def _replay(self, history: Sequence[HistoryItem]) -> Self:
        for item in sorted(history, key=lambda h: h.number):
            number = _check_number(item.number)
            if number in self._docs:
                raise ValueError(f"history repeats trial {number}")
            self._record(number, self._checked_vals(number, item.vals))
            for step, loss in item.curve:
                self.observe(number, step, loss)
            if item.loss is not None or not item.ok:
                self.tell(number, item.loss, item.ok)
        return self

    # -- the protocol ----------------------------------------------------------------------------
    def ask(self, number: int) -> Suggestion:
        """Suggest trial `number`'s configuration and record the trial as pending."""
        number = _check_number(number)
        if number in self._docs:
            raise ValueError(f"trial {number} was already asked")
        if number < len(self._points):  # a configuration the user asked to try first
            vals = {label: list(vs) for label, vs in self._points[number].items()}
        else:
            vals = self._suggest_vals(number, ask_seed(self.seed, number))
        self._record(number, vals)
        return Suggestion(params=self.params_of(vals), vals=vals)

    def tell(self, number: int, loss: float | None, ok: bool = True) -> None:
        """Report trial `number`: a loss (ok), a failure (ok=False) or, with loss None, pending again.

        A NaN loss is recorded as a failure (TPE cannot rank it); a failure keeps no loss, so
        `history()` shows it as (loss None, ok False). Telling twice overwrites.
        """
        if number not in self._docs:
            raise KeyError(f"trial {number} was never asked")
        doc = self._docs[number]
        if loss is not None:
            loss = float(loss)
            if math.isnan(loss):
                ok = False
        if not ok:  # a failed trial's loss, if any, is dropped: TPE ranks it last (loss +inf)
            doc["state"] = JOB_STATE_DONE
            doc["result"] = {"status": STATUS_FAIL}
            stored: tuple[float | None, bool] = (None, False)
        elif loss is None:
            doc["state"] = JOB_STATE_RUNNING
            doc["result"] = {"status": STATUS_RUNNING}
            stored = (None, True)
        else:
            doc["state"] = JOB_STATE_DONE
            doc["result"] = {"status": STATUS_OK, "loss": loss}
            stored = (loss, True)
        self._told[number] = stored
        # No `self._trials.refresh()`: the document changed in place between states that `Trials` keeps
        # (running, done), so the list it holds is the same, and refreshing rebuilt it over every trial.

    def observe(self, number: int, step: int, loss: float) -> None:
        """Record one intermediate report of trial `number` (NaN and infinite losses are dropped).

        Kept for `history()` (so a restored searcher holds the same curves); only multi-fidelity
        searchers use it to suggest.
        """
        if number not in self._docs:
            raise KeyError(f"trial {number} was never asked")
        loss = float(loss)
        if math.isfinite(loss):
            self._curves.setdefault(number, []).append((int(step), loss))

    def observe_point(self, number: int, step: int, losses: tuple[float, ...], violation: float) -> None:
        """A report of a search with several objectives or constraints: ignored here (these searchers rank
        by one loss; `quanta.search.pareto_tpe.ParetoTPE` ranks by Pareto order)."""

    # -- helpers ----------------------------------------------------------------------------------
    def params_of(self, vals: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
        """The nested configuration for a flat `vals` record (as in `Suggestion.vals`)."""
        assignment = spec_from_misc({"vals": dict(vals)})
        memo = {node: assignment[label] for node, label in self._param_nodes if label in assignment}
        params: dict[str, Any] = _plain(pyll.rec_eval(self._space_apply, memo=memo))
        return params

    def history(self) -> list[HistoryItem]:
        """Every asked trial, by number: what `restore` needs."""
        out = []
        for number in sorted(self._docs):
            loss, ok = self._told.get(number, (None, True))
            vals = {label: list(vs) for label, vs in self._docs[number]["misc"]["vals"].items() if vs}
            curve = tuple(self._curves.get(number, ()))
            out.append(HistoryItem(number=number, vals=vals, loss=loss, ok=ok, curve=curve))
        return out

    def __len__(self) -> int:
        return len(self._docs)

    def _checked_vals(self, number: int, vals: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        unknown = set(vals) - set(self._labels)
        if unknown:
            raise ValueError(f"trial {number}: labels {sorted(unknown)} are not in the space")
        out = {}
        for label, vs in vals.items():
            vs = list(vs)
            if len(vs) > 1:
                raise ValueError(f"trial {number}: label {label!r} has {len(vs)} values")
            if vs:
                out[label] = [_plain(vs[0])]
        return out

    def _record(self, number: int, vals: dict[str, list[Any]]) -> None:
        """Insert trial `number` as a running document built from plain `vals`.

        Asked and restored trials go through here alike, so both searchers hold identical documents.
        """
        misc = {
            "tid": number,
            "cmd": self._domain.cmd,
            "workdir": self._domain.workdir,
            "idxs": {label: ([number] if label in vals else []) for label in self._labels},
            "vals": {label: list(vals.get(label, [])) for label in self._labels},
        }
        (doc,) = self._trials.new_trial_docs([number], [None], [{"status": STATUS_RUNNING}], [misc])
        doc["state"] = JOB_STATE_RUNNING
        self._trials.insert_trial_docs([doc])
        stored = self._trials._dynamic_trials[-1]  # insert_trial_docs stores a copy: keep the stored one
        assert stored["tid"] == number
        self._docs[number] = stored
        self._append_order(number)
        _refresh_appended(self._trials, stored)

    def _append_order(self, tid: int) -> None:
        self._ascending = self._ascending and (not self._order or tid > self._order[-1])
        self._position[tid] = len(self._order)
        self._order.append(tid)

    def _suggest_vals(self, number: int, seed: int) -> dict[str, list[Any]]:
        """Trial `number`'s configuration as a plain `vals` record (the active labels only)."""
        misc = self._suggest(number, seed)[0]["misc"]
        return {label: [_plain(v) for v in vs] for label, vs in misc["vals"].items() if len(vs) > 0}

    def _suggest(self, number: int, seed: int) -> list[dict[str, Any]]:
        raise NotImplementedError


def _refresh_appended(trials: Trials, doc: dict[str, Any]) -> None:
    """`trials.refresh()` after `doc` was appended as its last document, in O(1) when that gives the same
    lists: `refresh` rebuilds `trials.trials` over every document (O(trials) per ask, ~3 % of a long
    simulated search), while this searcher's documents are only ever running or done (both valid states,
    so `trials.trials` holds every document in order) and appended one at a time."""
    shown, every = trials._trials, trials._dynamic_trials
    if (
        trials._exp_key is None
        and doc["state"] in JOB_VALID_STATES
        and every
        and every[-1] is doc
        and len(shown) == len(every) - 1
        and (not shown or shown[-1] is every[-2])
    ):
        shown.append(doc)
        trials._ids.add(doc["tid"])
    else:
        trials.refresh()


def _never_called(_config: Any) -> float:
    raise RuntimeError("the searcher's objective is never evaluated: trials report through tell()")


class HyperOptSearcher(_TrialsSearcher):
    """TPE (`hyperopt.tpe.suggest`) one trial at a time; pending trials count as running documents.

    The first `n_startup` trials (asked, whether told or not) are random; later asks use the losses
    told so far, with pending and failed trials counted as loss +inf.
    """

    _tpe: Posterior | None = None  # built at the first ask that needs it
    gamma: float = _default_gamma  # TPE's quantile: ceil(gamma * sqrt(n)) observations are "good" (HyperOpt's)

    def _suggest(self, number: int, seed: int) -> list[dict[str, Any]]:
        return self._posterior().suggest([number], self._trials, seed, n_startup_jobs=self.n_startup)

    def _posterior(self) -> Posterior:
        """`hyperopt.tpe.suggest` with its posterior graph built once for this searcher (quanta.search.tpe)."""
        if self._tpe is None:
            self._tpe = Posterior(self._domain, gamma=self.gamma)
        return self._tpe


class RandomSearcher(_TrialsSearcher):
    """Random search (`hyperopt.rand.suggest`): each trial depends only on (seed, number).

    Same API as `HyperOptSearcher`; `n_startup` is accepted and ignored. Its suggestions equal TPE's
    start-up suggestions for the same seed.
    """

    def _suggest(self, number: int, seed: int) -> list[dict[str, Any]]:
        docs: list[dict[str, Any]] = rand.suggest([number], self._domain, self._trials, seed)
        return docs
