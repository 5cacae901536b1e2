"""The searcher's knobs, declared once: a search spec's `search` block (`SearchAlgoSpec`), validated,
defaulted and documented here; `app.search.factory.make_searcher` builds the searcher from it.

Frozen, unknown fields refused (a typo is an error naming the field). Pure: pydantic only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Upper bounds (see `app.spec`): far above any real search, low enough that a typo or a hostile spec
# cannot make the controller create millions of rows.
MAX_TRIALS = 100_000
MAX_WARM_START = 100  # earlier searches one search may be warm-started from


class SearchAlgoSpec(BaseModel):
    """How configurations are proposed. `bohb` is TPE that learns from partial learning curves
    (`app.search.multifidelity.MultiFidelityTPE`): rungs start at `min_steps` (default max_steps / eta**4)
    and grow by `eta`; `min_points` trials must have reached a rung before TPE fits (default: one more
    than the number of hyperparameters); `rank` says how trials stopped at different rungs compare
    (default "level", BOHB's); `random_fraction` of the asks after the start-up are random, as in BOHB
    (default 1/3); `gamma` is TPE's; `multivariate` models the parameters jointly (off by default). The
    default. `tpe` learns from finished trials only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Literal["tpe", "random", "bohb"] = "bohb"  # the default: it learns from every curve
    n_startup: int = Field(default=20, ge=0, le=MAX_TRIALS)
    min_steps: int | None = Field(default=None, ge=1, description="first rung (bohb)")
    eta: float = Field(default=3.0, gt=1, description="rung growth factor (bohb)")
    min_points: int | None = Field(default=None, ge=1, description="trials at a rung before TPE fits on it (bohb)")
    # BOHB's rho, Falkner et al.'s 1/3: a model fitted on a few mediocre trials at a high rung cannot keep
    # every proposal near them. The default since 2026-11-25 (LCBench: sooner at medium, at hard even per run
    # but rid of the runs that settled on a mediocre region; live: no difference; docs/benchmarks.md).
    random_fraction: float = Field(
        default=1 / 3, ge=0, lt=1, description="share of asks after the start-up that are random (bohb; BOHB's rho)"
    )
    # TPE's gamma as HyperOpt defines it: the ceil(gamma * sqrt(n)) best of the n trials shape the "good"
    # density (capped at 25). HyperOpt's 0.25 makes that 2-3 trials in a search of 50-150; larger values
    # were later to the hard targets on LCBench (docs/benchmarks.md, stop 30).
    gamma: float = Field(default=0.25, gt=0, le=25, description="TPE's good-quantile factor (bohb; HyperOpt's gamma)")
    # How TPE ranks trials that stopped at different rungs (bohb): "level" (BOHB, the default) fits on the
    # highest rung with min_points trials, the others pending; "depth" (Optuna's TPE under a pruner) ranks
    # every trial by the deepest rung it reached, then by its loss there. With no random asks, "depth" was
    # sooner at hard on LCBench's suite with 4-8 workers, even with 2, 12 and 16, and later on the ten held-out
    # tasks with 4: within the seeds' spread, so the default stays (docs/benchmarks.md, stops 30 and 31).
    rank: Literal["level", "depth"] = Field(default="level", description="how trials at different rungs rank (bohb)")
    # One Parzen estimator over all the dimensions (Optuna's multivariate TPE; app.search.joint_tpe) rather
    # than HyperOpt's one per dimension, which keeps no combination of values (bohb).
    multivariate: bool = Field(default=False, description="model the dimensions jointly (bohb)")
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

    @field_validator("warm_start_from")
    @classmethod
    def _warm_ids(cls, v: list[int]) -> list[int]:
        if any(i < 1 for i in v):
            raise ValueError("search ids are positive integers")
        if len(set(v)) != len(v):
            raise ValueError("names a search twice")
        return v
