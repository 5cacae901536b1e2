"""The searcher's knobs, declared once: a search spec's `search` block (`SearchAlgoSpec`), validated,
defaulted and documented here; `quanta.search.factory.make_searcher` builds the searcher from it. Also the
rule every block of the spec applies to knobs it no longer has (`Retired`, `drop_retired`).

Frozen, unknown fields refused (a typo is an error naming the field). Pure: pydantic only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class KnobError(ValueError):
    """A knob's value refused by a rule of its block or spec rather than by its type: a removed knob set
    to anything but its old default, or a knob two blocks set differently. `field` is its path within the
    block that raised this (the spec's error prefixes that block's path)."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True)
class Retired:
    """A knob a block no longer has: the `default` it always had (a stored spec is a dump of every field,
    so specs stored before it went carry it), why it went (`why`: what its measurement said), and
    optionally `inert(block)`, true when its value had no effect in that block (e.g. a threshold of an
    option that is off)."""

    default: Any
    why: str
    inert: Callable[[Mapping[str, Any]], bool] | None = None


def drop_retired(block: Any, retired: Mapping[str, Retired]) -> Any:
    """`block` (a mapping of knobs as given) without its retired knobs: one at its old default, or inert
    there, is dropped silently, so that specs stored before it went load unchanged in meaning; one set to
    anything else raises `KnobError` naming it. Anything but a mapping passes unchanged (validation
    names what is wrong)."""
    if not isinstance(block, Mapping):
        return block
    out = dict(block)
    for name, r in retired.items():
        if name not in out:
            continue
        value = out.pop(name)
        if value == r.default or (r.inert is not None and r.inert(out)):
            continue
        raise KnobError(
            name, f"{value!r}: the knob was removed ({r.why}); only its old default {r.default!r} is accepted"
        )
    return out


# Upper bounds (see `quanta.spec`): far above any real search, low enough that a typo or a hostile spec
# cannot make the controller create millions of rows.
MAX_TRIALS = 100_000
MAX_WARM_START = 100  # earlier searches one search may be warm-started from


# Knobs the search block had and lost to their measurements (docs/decisions.md, "TPE ranks trials by
# BOHB's level, not by depth" and "One density per parameter, not a joint one").
SEARCH_RETIRED = {
    # Optuna's ranking of stopped trials (deepest rung first, then the loss there): no sooner than BOHB's
    # "level" by more than the seeds' spread on LCBench, and later on the held-out tasks with 4 workers.
    "rank": Retired("level", "Optuna's 'depth' ranking was no faster than BOHB's level on LCBench"),
    # One Parzen estimator over all the dimensions (Optuna's multivariate TPE): sooner on the 24 tasks it
    # was tried on, later on 8 of the 10 held-out ones.
    "multivariate": Retired(False, "the joint model was later than per-parameter TPE on LCBench's held-out tasks"),
}


class SearchAlgoSpec(BaseModel):
    """How configurations are proposed. `bohb` (the default) is TPE that learns from partial learning
    curves (`quanta.search.multifidelity.MultiFidelityTPE`): rungs start at `min_steps` (default max_steps /
    eta**4) and grow by `eta` (default 3), the scheduler's when its policy has rungs; `min_points` trials
    must have reached a rung before TPE fits there (default: one more than the number of
    hyperparameters), on the highest rung that has them (BOHB's level); `random_fraction` of the asks
    after the start-up are random, as in BOHB (default 1/3); the others take the configuration a Gaussian
    process expects to improve most on the level's losses (`acquisition: gp`, the default; with several
    objectives or constraints on ParEGO's scalarisation of them, with weights drawn for each ask; `tpe`:
    TPE's density ratio, on Pareto ranks with several); `gamma` is TPE's. `tpe` learns from finished trials only;
    `random` does not learn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Literal["tpe", "random", "bohb"] = Field(  # the default: it learns from every curve
        default="bohb",
        description="bohb: TPE on partial learning curves (BOHB-like); tpe: TPE on finished trials; random",
    )
    n_startup: int = Field(default=20, ge=0, le=MAX_TRIALS, description="random configurations before TPE fits")
    # The searcher's own rungs, for a policy without rungs: under asha and hyperband it fits at the
    # scheduler's (`SearchSpec.searcher_rungs`), and a spec may not set them differently here.
    min_steps: int | None = Field(
        default=None, ge=1, description="first rung (bohb; default max_steps / eta**4; asha/hyperband: the scheduler's)"
    )
    eta: float | None = Field(
        default=None, gt=1, description="rung growth factor (bohb; default 3; asha/hyperband: the scheduler's)"
    )
    min_points: int | None = Field(default=None, ge=1, description="trials at a rung before TPE fits on it (bohb)")
    # BOHB's rho, Falkner et al.'s 1/3: a model fitted on a few mediocre trials at a high rung cannot keep
    # every proposal near them (LCBench: sooner at medium, at hard even per run but rid of the runs that
    # settled on a mediocre region; live: no difference).
    random_fraction: float = Field(
        default=1 / 3, ge=0, lt=1, description="share of asks after the start-up that are random (bohb; BOHB's rho)"
    )
    # TPE's gamma as HyperOpt defines it: the ceil(gamma * sqrt(n)) best of the n trials shape the "good"
    # density (capped at 25). HyperOpt's 0.25 makes that 2-3 trials in a search of 50-150; larger values
    # were later to the hard targets on LCBench.
    gamma: float = Field(default=0.25, gt=0, le=25, description="TPE's good-quantile factor (bohb; HyperOpt's gamma)")
    # A GP's expected improvement reached LCBench's hard targets 1.18x / 1.32x sooner than TPE's density
    # ratio on the two halves of the suite and was sooner live at hard; with two objectives, ParEGO's
    # scalarisations on the same GP reached 95 % of the reference hypervolume sooner than TPE on Pareto
    # ranks (docs/decisions.md).
    acquisition: Literal["tpe", "gp"] | None = Field(
        default=None,
        description="bohb's model asks: gp (the default), a GP's expected improvement (with several objectives "
        "or constraints, on ParEGO's random scalarisation of them), or tpe, TPE's density ratio (on Pareto "
        "ranks with several)",
    )
    points_to_evaluate: list[dict[str, Any]] = Field(
        default_factory=list,
        max_length=MAX_TRIALS,
        description="configurations the first trials try, in order (each gives every parameter of the space)",
    )
    warm_start_from: list[int] = Field(
        default_factory=list,
        max_length=MAX_WARM_START,
        description="ids of earlier searches with the same space whose trials seed the searcher",
    )

    @model_validator(mode="before")
    @classmethod
    def _retired(cls, data: Any) -> Any:
        return drop_retired(data, SEARCH_RETIRED)

    @field_validator("warm_start_from")
    @classmethod
    def _warm_ids(cls, v: list[int]) -> list[int]:
        if any(i < 1 for i in v):
            raise ValueError("search ids are positive integers")
        if len(set(v)) != len(v):
            raise ValueError("names a search twice")
        return v
