"""HyperOpt's TPE suggestion (`hyperopt.tpe.suggest`) with its posterior graph built once per searcher.

`hyperopt.tpe.suggest` begins every call by building the TPE posterior as a pyll graph
(`build_posterior_wrapper`: a clone of the search space's graph with every random variable replaced by
its adaptive-Parzen estimator), then evaluates that graph with the observations bound to three literal
nodes. The graph depends only on the domain, the prior weight and gamma, never on the observations, and
evaluating it does not change it; building it was the largest part of an ask on a 7-dimensional space.
`Posterior` builds it once and `suggest` is `hyperopt.tpe.suggest` otherwise line for line (same
arguments, same defaults, same random stream), so it suggests exactly what HyperOpt would
(`tests/unit/test_searcher.py` checks it against `hyperopt.tpe.suggest` itself).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hyperopt import pyll, rand
from hyperopt.base import Domain, Trials, miscs_to_idxs_vals, miscs_update_idxs_vals
from hyperopt.tpe import (
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
        # The last observations read (`_observed`): the miscs they were read from and their idxs/vals.
        self._seen: tuple[list[dict[str, Any]], list[str], dict[str, list[Any]], dict[str, list[Any]]] | None = None

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
        domain = self.domain
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
            result: list[dict[str, Any]] = rand.suggest(new_ids, domain, trials, seed)
            return result
        if self._graph is None:
            self._graph = build_posterior_wrapper(domain, self.prior_weight, self.gamma)
        observed, observed_loss, posterior = self._graph
        first_new_id = new_ids[0]
        if tids:
            fake_id_0 = max(max(tids), first_new_id) + 2
        else:
            assert n_startup_jobs <= 0
            fake_id_0 = first_new_id + 2
        fake_ids = list(range(fake_id_0, fake_id_0 + n_EI_candidates))
        memo = {domain.s_new_ids: fake_ids, domain.s_rng: np.random.default_rng(seed)}
        memo[observed_loss["idxs"]] = tids
        memo[observed_loss["vals"]] = losses
        observed_idxs_dict, observed_vals_dict = self._observed([doc["misc"] for doc in docs], list(domain.params))
        memo[observed["idxs"]] = observed_idxs_dict
        memo[observed["vals"]] = observed_vals_dict
        idxs, vals = pyll.rec_eval(posterior, memo=memo, print_node_on_error=False)
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

    def _observed(self, miscs: list[dict[str, Any]], keys: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """`hyperopt.base.miscs_to_idxs_vals(miscs, keys)`, read incrementally: a searcher's documents
        only grow (a trial's `misc` is written once, when it is asked), so when the last call's miscs are
        the first ones of these (the same objects) only the new ones are read. Copies are returned (the
        graph must not share lists with this cache)."""
        seen = self._seen
        grown = seen is not None and seen[1] == keys and len(seen[0]) <= len(miscs)
        if seen is not None and grown and _same(seen[0], miscs[: len(seen[0])]):
            old, _, idxs, vals = seen
            new_idxs, new_vals = miscs_to_idxs_vals(miscs[len(old) :], keys=keys)
            for k in keys:
                idxs[k].extend(new_idxs[k])
                vals[k].extend(new_vals[k])
        else:
            idxs, vals = miscs_to_idxs_vals(miscs, keys=keys)
        # The misc dicts are kept (not copied): `_same` compares identities, and a misc is never rewritten.
        self._seen = (list(miscs), keys, idxs, vals)
        return {k: list(v) for k, v in idxs.items()}, {k: list(v) for k, v in vals.items()}
