"""HyperOpt's TPE suggestion (`hyperopt.tpe.suggest`) with its posterior graph built once per searcher.

`hyperopt.tpe.suggest` begins every call by building the TPE posterior as a pyll graph
(`build_posterior_wrapper`: a clone of the search space's graph with every random variable replaced by
its adaptive-Parzen estimator), then evaluates that graph with the observations bound to three literal
nodes. The graph depends only on the domain, the prior weight and gamma, never on the observations, and
evaluating it does not change it; building it was the largest part of an ask on a 7-dimensional space.
`Posterior` builds it once and `suggest` is `hyperopt.tpe.suggest` otherwise line for line (same
arguments, same defaults, same random stream), so it suggests exactly what HyperOpt would
(`tests/unit/test_searcher.py` checks it against `hyperopt.tpe.suggest` itself). Two parts are done
outside the graph, with the same results: each parameter's split of its observations into the trials
below and above TPE's gamma quantile (HyperOpt's `ap_split_trials`, a Python loop over every
observation; here `_split`, in numpy, bound as that node's value), and reading the documents'
observations, which only grow, incrementally (`_Observations`). `suggest_in_order` serves a searcher
that keeps its documents in tid order without a Python loop over them per ask. And the graph is not
walked by `pyll.rec_eval` per ask: the order in which rec_eval would evaluate its nodes depends only on
the graph and on which nodes are bound beforehand, both fixed, so it is worked out once (`_Program`) and
each ask calls the nodes' implementations in that order (same calls, same random stream). HyperOpt's
posterior has no `switch` node even for conditional spaces (it vectorises them); should one appear (it
is evaluated lazily, on its index's value, so in no fixed order), rec_eval is kept.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np
from hyperopt import pyll, rand
from hyperopt.base import Domain, Trials, miscs_to_idxs_vals, miscs_update_idxs_vals
from hyperopt.tpe import (
    DEFAULT_LF,
    _default_gamma,
    _default_n_EI_candidates,
    _default_n_startup_jobs,
    _default_prior_weight,
    build_posterior_wrapper,
)

__all__ = ["Posterior"]


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Are the two lists the same objects, one by one?"""
    return all(x is y for x, y in zip(a, b, strict=True))


class Posterior:
    """TPE's posterior graph for one domain (and prior weight, gamma), built once; `suggest` as
    `hyperopt.tpe.suggest(new_ids, domain, trials, seed, ...)` with that domain."""

    def __init__(self, domain: Domain, prior_weight: float = _default_prior_weight, gamma: float = _default_gamma):
        self.domain = domain
        self.prior_weight = prior_weight
        self.gamma = gamma
        self._graph: tuple[Any, Any, Any] | None = None  # (observed, observed_loss, posterior), built lazily
        self._program: _Program | None = None  # the posterior's evaluation order (None: rec_eval it)
        self._split_nodes: dict[str, Any] = {}  # label -> the graph's `ap_split_trials` node for it
        self._seen: _Observations | None = None  # the documents' observations read so far (`_observed`)

    def suggest(
        self,
        new_ids: list[int],
        trials: Trials,
        seed: int,
        n_startup_jobs: int = _default_n_startup_jobs,
        n_EI_candidates: int = _default_n_EI_candidates,
    ) -> list[dict[str, Any]]:
        """`hyperopt.tpe.suggest(new_ids, self.domain, trials, seed, self.prior_weight, n_startup_jobs,
        n_EI_candidates, self.gamma, verbose=False)`, on the graph built once."""
        scored = []
        for doc in trials.trials:
            loss = doc["result"].get("loss")
            scored.append((float("inf") if loss is None else float(loss), doc))
        return self.suggest_scored(new_ids, scored, trials, seed, n_startup_jobs, n_EI_candidates)

    def suggest_scored(
        self,
        new_ids: list[int],
        scored: list[tuple[float, dict[str, Any]]],
        trials: Trials,
        seed: int,
        n_startup_jobs: int = _default_n_startup_jobs,
        n_EI_candidates: int = _default_n_EI_candidates,
    ) -> list[dict[str, Any]]:
        """`suggest` with each document's loss given beside it (inf: none yet) rather than read from its
        result: a searcher that scores documents its own way (a rung's losses) need not write them into
        every document and refresh `trials` twice per ask. `trials` only makes the new document."""
        # Loop over previous trials to collect best_docs and best_docs_loss (as hyperopt does).
        best_docs: dict[int, dict[str, Any]] = {}
        best_docs_loss: dict[int, float] = {}
        for loss, doc in scored:
            tid = doc["misc"].get("from_tid", doc["tid"])
            best_docs_loss.setdefault(tid, loss)
            if loss <= best_docs_loss[tid]:
                best_docs_loss[tid] = loss
                best_docs[tid] = doc
        # Sorted by order of suggestion, so that linear forgetting removes the oldest ones.
        tid_docs = sorted(best_docs.items())
        losses = [best_docs_loss[tid] for tid, _doc in tid_docs]
        tids, docs = list(zip(*tid_docs, strict=True)) if tid_docs else ([], [])
        if len(docs) < n_startup_jobs:
            result: list[dict[str, Any]] = rand.suggest(new_ids, self.domain, trials, seed)
            return result
        miscs = [doc["misc"] for doc in docs]
        seen = self._seen  # grown: the documents read last time (all kept) are the first ones of these
        n = 0 if seen is None else seen.count
        grown = seen is not None and len(seen.miscs) == n <= len(miscs) and _same(seen.miscs, miscs[:n])
        observed = self._observed(miscs[n:] if grown else miscs, not grown, keep_miscs=True)
        top = max(tids, default=None)
        return self._suggest_from(new_ids, list(tids), losses, top, observed, trials, seed, n_EI_candidates)

    def suggest_in_order(
        self,
        new_ids: list[int],
        docs: list[dict[str, Any]],
        tids: list[int],
        losses: np.ndarray,
        trials: Trials,
        seed: int,
        n_EI_candidates: int = _default_n_EI_candidates,
    ) -> list[dict[str, Any]]:
        """`suggest_scored(new_ids, list(zip(losses, docs)), trials, seed, n_startup_jobs=0, ...)` for a
        caller that keeps its documents in order, without a Python loop over them. The caller promises:
        `tids[i]` is `docs[i]`'s tid, the tids are unique and ascending, no document has a `from_tid`, and
        the documents only grow: every earlier call's `docs` (on this Posterior) are the first ones of
        these, the same objects, their `misc` unchanged. Only the new documents' observations are read
        (the last document already read is checked by identity; a caller that breaks the promise in
        another way gets wrong suggestions, which `suggest_scored` is there to avoid)."""
        n_seen = 0 if self._seen is None else self._seen.count
        fresh = not (0 < n_seen <= len(docs) and docs[n_seen - 1]["misc"] is self._seen.last)  # type: ignore[union-attr]
        tail = docs if fresh else docs[n_seen:]
        observed = self._observed([doc["misc"] for doc in tail], fresh, keep_miscs=False)
        top = tids[-1] if tids else None
        return self._suggest_from(new_ids, tids, losses, top, observed, trials, seed, n_EI_candidates)

    def _suggest_from(
        self,
        new_ids: list[int],
        tids: list[int],
        losses: Any,
        max_tid: int | None,
        observed: dict[str, tuple[np.ndarray, np.ndarray]],
        trials: Trials,
        seed: int,
        n_EI_candidates: int,
    ) -> list[dict[str, Any]]:
        """The rest of `hyperopt.tpe.suggest` once the documents' tids, losses and observations are read."""
        domain = self.domain
        if self._graph is None:
            self._graph = build_posterior_wrapper(domain, self.prior_weight, self.gamma)
            self._split_nodes = _split_nodes(self._graph[0]["idxs"], self._graph[2])
            bound = [domain.s_new_ids, domain.s_rng, *self._split_nodes.values()]
            self._program = _Program.of(self._graph[2], bound)
        posterior = self._graph[2]
        first_new_id = new_ids[0]
        # (hyperopt asserts n_startup_jobs <= 0 when there are no documents: the callers ask rand before)
        fake_id_0 = (first_new_id if max_tid is None else max(max_tid, first_new_id)) + 2
        fake_ids = list(range(fake_id_0, fake_id_0 + n_EI_candidates))
        memo = {domain.s_new_ids: fake_ids, domain.s_rng: np.random.default_rng(seed)}
        # Each parameter's below/above split is bound as its `ap_split_trials` node's value, computed here
        # with numpy (`_split`) rather than by the graph, whose Python loop over every observation was a
        # third of an ask: the graph then never reads the observations (or the losses) themselves.
        memo.update(_split(self._split_nodes, observed, tids, losses, self.gamma))
        # memo_gc only frees intermediate values early (it replaces them with a marker once every client
        # has read them); on a graph this small that bookkeeping cost more than it saved.
        if self._program is not None:
            idxs, vals = self._program.run(memo)
        else:
            idxs, vals = pyll.rec_eval(posterior, memo=memo, memo_gc=False, print_node_on_error=False)
        # hyperopt's offset for randint(low, high) parameters
        for label, param in domain.params.items():
            if param.name == "randint" and len(param.pos_args) == 2:
                offset = param.pos_args[0].obj
                vals[label] = [val + offset for val in vals[label]]
        rval_specs = [None]
        rval_results = [domain.new_result()]
        rval_miscs = [{"tid": first_new_id, "cmd": domain.cmd, "workdir": domain.workdir}]
        miscs_update_idxs_vals(rval_miscs, idxs, vals, idxs_map={fake_ids[0]: first_new_id}, assert_all_vals_used=False)
        out: list[dict[str, Any]] = trials.new_trial_docs([first_new_id], rval_specs, rval_results, rval_miscs)
        return out

    def _observed(
        self, miscs: list[dict[str, Any]], fresh: bool, keep_miscs: bool
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Each parameter's observations as arrays (tids, values): `hyperopt.base.miscs_to_idxs_vals`
        over every document, read incrementally. A searcher's documents only grow (a trial's `misc` is
        written once, when it is asked), so unless `fresh` (start over from `miscs`), `miscs` are the
        documents after the ones already read and only they are read. The arrays are the cache's own:
        callers must not change them."""
        keys = list(self.domain.params)
        seen = self._seen
        if fresh or seen is None:
            seen = self._seen = _Observations(keys)
        seen.add(miscs, keep_miscs)
        return seen.arrays()


class _Observations:
    """The observations of the documents read so far, per parameter: `miscs_to_idxs_vals`'s lists, grown
    as documents are added, and the same as numpy arrays (converted once per growth, and only the new
    part when its dtype matches: `np.asarray` of the whole list would give the same array)."""

    def __init__(self, keys: list[str]):
        self.keys = keys
        self.count = 0  # documents read
        self.last: dict[str, Any] | None = None  # the last document's misc
        self.miscs: list[dict[str, Any]] = []  # every misc read, when the caller checks them all
        self._idxs: dict[str, list[Any]] = {k: [] for k in keys}
        self._vals: dict[str, list[Any]] = {k: [] for k in keys}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._converted = {k: 0 for k in keys}  # how much of each list `_arrays` holds

    def add(self, miscs: list[dict[str, Any]], keep_miscs: bool) -> None:
        if not miscs:
            return
        idxs, vals = miscs_to_idxs_vals(miscs, keys=self.keys)
        for k in self.keys:
            self._idxs[k].extend(idxs[k])
            self._vals[k].extend(vals[k])
        self.count += len(miscs)
        self.last = miscs[-1]
        if keep_miscs:
            self.miscs.extend(miscs)

    def arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        for k in self.keys:
            done, lists = self._converted[k], (self._idxs[k], self._vals[k])
            if k in self._arrays and done == len(lists[0]):
                continue
            old = self._arrays.get(k)
            new = tuple(np.asarray(xs[done:]) for xs in lists)
            if old is not None and done > 0 and all(o.dtype == n.dtype for o, n in zip(old, new, strict=True)):
                pair = tuple(np.concatenate((o, n)) for o, n in zip(old, new, strict=True))
            else:
                pair = tuple(np.asarray(xs) for xs in lists)
            self._arrays[k] = (pair[0], pair[1])
            self._converted[k] = len(lists[0])
        return self._arrays


class _Program:
    """A pyll graph's evaluation as `pyll.rec_eval(top, memo=...)` performs it when `memo` binds the
    same nodes every time: the nodes it would evaluate, in the order it would, each with its
    implementation and inputs, found once (`of`) by rec_eval's own traversal (a stack of nodes; a node
    whose inputs are not all known goes back on it under them). `run` then calls the implementations in
    that order; a node whose implementation returns a graph is evaluated by rec_eval, as rec_eval does."""

    def __init__(self, top: Any, steps: list[tuple[Any, Any, list[Any], list[tuple[str, Any]]]]):
        self.top = top
        self.steps = steps  # (node, implementation or None for a literal, positional inputs, named inputs)

    @classmethod
    def of(cls, top: Any, bound: Iterable[Any]) -> _Program | None:
        """The program of `top` with `bound` given; None when the graph has a `switch` (evaluated lazily,
        on the value of its index: no fixed order)."""
        top = pyll.as_apply(top)
        known = set(bound)
        steps: list[tuple[Any, Any, list[Any], list[tuple[str, Any]]]] = []
        todo = deque([top])
        while todo:
            node = todo.pop()
            if node in known:
                continue
            if node.name == "switch":
                return None
            if isinstance(node, pyll.Literal):
                known.add(node)
                steps.append((node, None, [], []))
                continue
            waiting = [v for v in node.inputs() if v not in known]
            if waiting:
                todo.append(node)
                todo.extend(waiting)
            else:
                known.add(node)
                steps.append((node, pyll.scope._impls[node.name], list(node.pos_args), list(node.named_args)))
        return cls(top, steps)

    def run(self, memo: dict[Any, Any]) -> Any:
        """`pyll.rec_eval(self.top, memo=memo, memo_gc=False)` (`memo` gains the evaluated nodes)."""
        for node, impl, pos, named in self.steps:
            if impl is None:
                memo[node] = node.obj
                continue
            rval = impl(*[memo[v] for v in pos], **{k: memo[v] for k, v in named})
            if isinstance(rval, pyll.Apply):
                rval = pyll.rec_eval(rval, memo=memo, memo_gc=False)
            memo[node] = rval
        return memo[self.top]


def _split_nodes(observed_idxs: Any, posterior: Any) -> dict[str, Any]:
    """Each parameter's `ap_split_trials` node in the posterior graph, by label: the node
    `build_posterior` made as `ap_split_trials(observed_idxs[label], observed_vals[label], loss idxs,
    loss vals, gamma)`."""
    nodes: dict[str, Any] = {}
    for node in pyll.dfs(pyll.as_apply(posterior)):
        if node.name == "ap_split_trials":
            getitem = node.pos_args[0]
            if getitem.name != "getitem" or getitem.pos_args[0] is not observed_idxs:
                raise RuntimeError("hyperopt's TPE graph is not shaped as quanta.search.tpe expects")
            nodes[getitem.pos_args[1].obj] = node
    return nodes


def _split(
    split_nodes: dict[str, Any],
    observed: dict[str, tuple[np.ndarray, np.ndarray]],
    tids: Any,
    losses: Any,
    gamma: float,
) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    """What `hyperopt.tpe.ap_split_trials(*observed[label], tids, losses, gamma)` returns for each label,
    as {its node: (below, above)}, with array operations: the `n_below` lowest losses (the same
    `np.argsort` order, so ties split alike) are "below"; each parameter's observations keep their
    order in both halves. When a parameter was observed on every document (its idxs are `tids`, in
    order) the mask over the documents is used as it is."""
    tid_arr = np.asarray(tids)
    l_vals = np.asarray(losses)
    n_below = min(int(np.ceil(gamma * np.sqrt(len(l_vals)))), DEFAULT_LF)
    order = np.argsort(l_vals)
    below_all = np.zeros(len(l_vals), dtype=bool)
    below_all[order[:n_below]] = True
    below_ids, above_ids = tid_arr[order[:n_below]], tid_arr[order[n_below:]]  # for conditional parameters
    out: dict[Any, tuple[np.ndarray, np.ndarray]] = {}
    for label, node in split_nodes.items():
        o_idxs, o_vals = observed[label]
        if len(o_idxs) == len(tid_arr) and np.array_equal(o_idxs, tid_arr):
            below, above = o_vals[below_all], o_vals[~below_all]
        else:  # a conditional parameter: its own observations, matched by id as hyperopt does
            below, above = o_vals[np.isin(o_idxs, below_ids)], o_vals[np.isin(o_idxs, above_ids)]
        # hyperopt builds each half as np.asarray(a list): an empty one is float64 whatever o_vals was.
        out[node] = (below if len(below) else np.asarray([]), above if len(above) else np.asarray([]))
    return out
