"""Read models of searches: `SearchSummary` (as lists and event streams show one), `SearchOut` (with its
spec) and their parts, and what users send about a search: `SearchPatch` (tags and notes, with their
bounds) and `SearchResume` (more budget). Built from `SearchRow` by `from_row`; the field names are the
API's JSON contract (see `quanta.db.public`).
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, StringConstraints, field_validator
from pydantic import Field as PydanticField
from sqlmodel import Field, SQLModel

from quanta.db.models import SearchRow
from quanta.db.public.readable import parsed_spec, shown
from quanta.search.knobs import MAX_TRIALS
from quanta.status import SearchStatus, TrialCounts


class BestOut(SQLModel):
    trial_id: int | None
    metric: float | None
    params: dict[str, Any] | None


class TrialCountsOut(SQLModel):
    """How a search's trials stand (`quanta.status.TrialCounts`), each trial in one of the first seven."""

    queued: int = PydanticField(description="not started yet")
    running: int = PydanticField(description="computing now")
    parked: int = PydanticField(description="started and alive, not computing now (between quanta, or held at a rung)")
    completed: int = PydanticField(description="ran all their steps")
    stopped: int = PydanticField(description="ended when their search ended, or by a user: nothing judged them")
    killed: int = PydanticField(description="judged hopeless by the policy")
    failed: int = PydanticField(description="raised, or crashed past their retries")
    evaluated: int = PydanticField(description="ended, or judged at a rung: what a progress bar counts")


class ProgressOut(SQLModel):
    trials_created: int
    trials_done: int = PydanticField(description="trials in a final state")
    max_trials: int | None
    trials: TrialCountsOut | None = PydanticField(
        default=None,
        description="how the trials stand, as the controller last stored it (null: not stored, e.g. queued)",
    )


class MetricOut(SQLModel):
    name: str | None
    goal: str | None
    target: float | None


class SearchSummary(SQLModel):
    """A search as lists and event streams show it: everything but its spec (`SearchOut` adds it)."""

    id: int
    name: str
    status: SearchStatus
    created_at: float
    started_at: float | None
    finished_at: float | None
    reached: bool
    seconds_to_target: float | None
    best: BestOut | None
    progress: ProgressOut
    metric: MetricOut
    policy: str | None
    error: str | None = None
    owner: str = Field(description="the name of the user it belongs to, as it was submitted")
    owner_id: int | None = Field(
        default=None, description="the id of the user it belongs to (null: that user was deleted)"
    )
    waiting: str | None = Field(default=None, description="why the controller holds it (its owner's quota), if it does")
    warning: str | None = Field(
        default=None, description="what the controller warns about (its metric not reported, naming those that are)"
    )
    tags: list[str] = Field(default_factory=list, description="its users' labels (PATCH /searches/{id})")
    notes: str | None = Field(default=None, description="its users' notes (PATCH /searches/{id})")

    @classmethod
    def from_row(cls, row: SearchRow, trials_done: int) -> Self:
        """`trials_done`: how many of its trials are final."""
        assert row.id is not None
        spec = parsed_spec(row)
        counts = TrialCountsOut(**TrialCounts.from_dict(row.trial_counts).as_dict()) if row.trial_counts else None
        best = None
        if row.best_trial_id is not None:
            best = BestOut(trial_id=row.best_trial_id, metric=row.best_metric, params=shown(row.best_params))
        extra = {"spec": shown(row.spec or {})} if "spec" in cls.model_fields else {}
        return cls(
            **extra,
            id=row.id,
            name=row.name,
            status=SearchStatus(row.status),
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
            reached=bool(row.reached),
            seconds_to_target=row.seconds_to_target,
            best=best,
            progress=ProgressOut(
                trials_created=row.trials_created,
                trials_done=trials_done,
                max_trials=spec.budget.max_trials if spec else None,
                trials=counts,
            ),
            metric=MetricOut(
                name=spec.metric.name if spec else None,
                goal=spec.metric.goal if spec else None,
                target=spec.metric.target if spec else None,
            ),
            policy=spec.scheduler.policy if spec else None,
            error=row.error,
            owner=row.owner,
            owner_id=row.owner_id,
            waiting=row.waiting,
            warning=row.warning,
            tags=list(row.tags or []),
            notes=row.notes,
        )


class SearchOut(SearchSummary):
    """A search with its spec (`GET /searches/{id}`, what a POST returns)."""

    spec: dict[str, Any] = Field(description="the spec as validated and stored (with every default filled in)")


# What users write about a search (`PATCH /searches/{id}`): the store keeps them within these bounds, and
# the API takes `SearchPatch` as the body, so a value out of range is a 422 naming the field.
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:+=/-]{0,39}$"
MAX_TAGS = 20
MAX_NOTES = 4000
Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]


class SearchPatch(BaseModel):
    """What a user may change about a search (fields left out stay as they are): its `tags` (the whole
    list: `[]` removes them all; repeated ones are kept once, in the order given) and its `notes` (`""`
    or null removes them)."""

    model_config = ConfigDict(extra="forbid")

    tags: list[Tag] | None = PydanticField(
        default=None,
        max_length=MAX_TAGS,
        description=f"at most {MAX_TAGS} labels of 1-40 letters, digits, '_', '.', ':', '+', '=', '/' or '-'",
    )
    notes: str | None = PydanticField(default=None, max_length=MAX_NOTES, description=f"at most {MAX_NOTES} characters")

    @field_validator("tags")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else list(dict.fromkeys(v))


class SearchResume(BaseModel):
    """More budget for a search being resumed (`POST /searches/{id}/resume`): added to its
    `budget.max_trials` and `budget.max_seconds` (0: as it is)."""

    model_config = ConfigDict(extra="forbid")

    max_trials: int = PydanticField(default=0, ge=0, le=MAX_TRIALS, description="trials added to budget.max_trials")
    max_seconds: float = PydanticField(
        default=0.0, ge=0, le=366 * 86400.0, allow_inf_nan=False, description="seconds added to budget.max_seconds"
    )
