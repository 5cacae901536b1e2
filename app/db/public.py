"""Read models: what readers of the store get (the API's JSON contract, FastAPI's "Public" models).

`Store` builds them from table rows (`quanta.db.models`); the API returns them as they are. Their field
names and shapes are a contract the dashboard and the SDK read: change them only with both.
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, StringConstraints, field_validator
from pydantic import Field as PydanticField
from sqlmodel import Field, SQLModel

from quanta.db.models import ConfigChangeRow, ForkRow, SearchRow, TokenRow, TrialRow, UserRow
from quanta.search.knobs import MAX_TRIALS
from quanta.spec import MAX_DEPTH, SearchSpec, SpecError, spec_from_stored
from quanta.status import SearchStatus, TrialCounts, TrialStatus

log = logging.getLogger("quanta.db")


def parsed_spec(row: SearchRow) -> SearchSpec | None:
    """The search's spec, parsed (it was validated when submitted); None when the stored one no longer
    parses (e.g. written by another version), so readers still see the row."""
    try:
        return spec_from_stored(row.spec or {})
    except SpecError:
        log.warning("search %s: its stored spec does not parse", row.id)
        return None


NESTED_TOO_DEEPLY = "[nested too deeply to show]"


def shown(value: Any, limit: int = MAX_DEPTH) -> Any:
    """`value` as a reader is sent it: mappings and lists nested deeper than `limit` levels are replaced by
    `NESTED_TOO_DEEPLY`. Specs are refused deeper than that when posted, but a row stored before the
    bound must not make every page that shows it fail (JSON encoders give up a few hundred levels down)."""
    if not isinstance(value, dict | list):
        return value
    if limit <= 0:
        return NESTED_TOO_DEEPLY
    if isinstance(value, dict):
        return {k: shown(v, limit - 1) for k, v in value.items()}
    return [shown(v, limit - 1) for v in value]


def finite(x: float | None) -> float | None:
    """`x`, or None when it is NaN or infinite (JSON cannot carry those)."""
    return x if x is not None and math.isfinite(x) else None


# ---- searches ----------------------------------------------------------------------------------


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


# ---- users -------------------------------------------------------------------------------------

# Bounds of a user's settings: the stores validate against them (`UserCreate`, `UserUpdate`) and the API
# takes them as bodies, so a value out of range is a 422 naming the field.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$"
MAX_WEIGHT = 1000.0
MAX_QUOTA = 100_000
# admin: everything; member: their own searches, read and write; viewer: every search, read only (a
# write is a 403), for sharing a view without sharing an admin's token. Spelled exactly so (`Admin` is
# refused, not read as `admin`): one role has one name.
Role = Literal["admin", "member", "viewer"]


class UserUpdate(BaseModel):
    """What an admin may change about a user (fields left out stay as they are)."""

    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    weight: float | None = PydanticField(
        default=None, gt=0, le=MAX_WEIGHT, allow_inf_nan=False, description="share of device time relative to others"
    )
    max_alive_trials: int | None = PydanticField(default=None, ge=0, le=MAX_QUOTA, description="0 = no quota")
    max_devices: int | None = PydanticField(default=None, ge=0, le=MAX_QUOTA, description="0 = no quota")


class UserCreate(BaseModel):
    """A new user; the name is unique."""

    model_config = ConfigDict(extra="forbid")

    name: str = PydanticField(pattern=NAME_PATTERN, description="1-64 letters, digits, '_', '.', '@' or '-'")
    role: Role = "member"
    weight: float = PydanticField(default=1.0, gt=0, le=MAX_WEIGHT, allow_inf_nan=False)
    max_alive_trials: int = PydanticField(default=0, ge=0, le=MAX_QUOTA, description="0 = no quota")
    max_devices: int = PydanticField(default=0, ge=0, le=MAX_QUOTA, description="0 = no quota")


class UserOut(SQLModel):
    id: int = Field(description="never given to another user, also after this one is deleted")
    name: str
    role: Role
    weight: float
    max_alive_trials: int
    max_devices: int
    created_at: float

    @classmethod
    def from_row(cls, row: UserRow) -> UserOut:
        assert row.id is not None
        return cls(
            id=row.id,
            name=row.name,
            role="admin" if row.role == "admin" else "viewer" if row.role == "viewer" else "member",
            weight=row.weight,
            max_alive_trials=row.max_alive_trials,
            max_devices=row.max_devices,
            created_at=row.created_at,
        )


class UserShareOut(SQLModel):
    """One user's share of device time (`GET /shares`). From the stored quanta over the request's window:
    `device_s`, the device-seconds the user's trials computed (a device shared by k trials counts 1/k to
    each) and `share`, that over all users' device-seconds in the window (None when nobody computed).
    From the share layer's accounts (`quanta.executor.policy.share`, as of `SharesOut.accounts_at`; None
    when the controller has none for the user): `devices` held and `fair_devices` due at the last
    plan, and over the accounts' decaying window the device-seconds `used_s`, `fair_s` (its
    work-conserving fair share) and `ideal_s` (its weighted share of the cluster alone, up to its
    demand), and `rho` = ideal_s / used_s (Themis's finish-time fairness: > 1 behind its share)."""

    name: str
    weight: float = Field(description="share of device time relative to the other users'")
    device_s: float
    share: float | None
    devices: float | None = None
    fair_devices: float | None = None
    used_s: float | None = None
    fair_s: float | None = None
    ideal_s: float | None = None
    rho: float | None = None


class SharesOut(SQLModel):
    """Users' shares of device time: `users` (a member gets their own row only), the stored quanta's
    window [`since`, `at`] they were measured over, the cluster's `devices` (as last published), and the
    share layer's accounts: when they were last brought up to date (`accounts_at`) and their time
    constant (`accounts_window_s`), both None before the share layer first planned."""

    at: float
    since: float
    window_s: float
    devices: int
    accounts_at: float | None
    accounts_window_s: float | None
    users: list[UserShareOut]


class TokenOut(SQLModel):
    """A token as listed: never the token itself, nor its hash."""

    id: int
    user: str
    name: str
    prefix: str = Field(description="the token's first characters (empty for a token not used since it was re-keyed)")
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    active: bool = Field(description="neither revoked nor expired")

    @classmethod
    def from_row(cls, row: TokenRow, now: float) -> TokenOut:
        assert row.id is not None
        expired = row.expires_at is not None and row.expires_at <= now
        return cls(
            id=row.id,
            user=row.user_name,
            name=row.name,
            prefix=row.prefix,
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            active=row.revoked_at is None and not expired,
        )


MAX_EXPIRES_DAYS = 3650


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = PydanticField(default="api", min_length=1, max_length=64, description="a label")
    expires_days: int | None = PydanticField(
        default=None, ge=1, le=MAX_EXPIRES_DAYS, description="days until it stops working (none: never)"
    )


class NewToken(TokenOut):
    token: str = Field(description="the token: shown this once, stored only as a keyed hash")


# ---- trials ------------------------------------------------------------------------------------


class TrialOut(SQLModel):
    id: int
    search_id: int
    number: int
    params: dict[str, Any]
    status: TrialStatus
    metric: float | None
    best_metric: float | None
    steps: int
    device_seconds: float
    retries: int
    error: str | None
    reason: str | None = Field(
        default=None, description="why a stopped or killed trial ended early (killed: the verdict)"
    )
    created_at: float
    started_at: float | None
    finished_at: float | None
    parent_id: int | None = Field(default=None, description="the trial whose state it started from (a fork)")
    fork_step: int | None = Field(default=None, description="that trial's step then (null while it is taken)")

    @classmethod
    def from_row(cls, t: TrialRow) -> TrialOut:
        assert t.id is not None
        return cls(
            id=t.id,
            search_id=t.search_id,
            number=t.number,
            params=shown(t.params),
            status=TrialStatus(t.status),
            metric=finite(t.metric),
            best_metric=finite(t.best_metric),
            steps=t.steps,
            device_seconds=round(t.device_seconds, 3),
            retries=t.retries,
            error=t.error,
            reason=t.reason,
            created_at=t.created_at,
            started_at=t.started_at,
            finished_at=t.finished_at,
            parent_id=t.parent_id,
            fork_step=t.fork_step,
        )


class CurvePoint(SQLModel):
    step: int
    at: float
    metrics: dict[str, float | None]
    objective: float | None


class QuantumOut(SQLModel):
    devices: list[str]
    started_at: float
    ended_at: float
    steps: int
    rate: float
    packed_with: list[int]


class TrialDetail(TrialOut):
    curve: list[CurvePoint]
    quanta: list[QuantumOut]


# ---- search views ------------------------------------------------------------------------------


class CurvesOut(SQLModel):
    trials: dict[str, list[tuple[int, float]]] = Field(description="trial id -> [[step, objective], ...]")
    status: dict[str, str]


class TimelineItem(SQLModel):
    trial_id: int
    devices: list[str]
    started_at: float
    ended_at: float
    packed_with: list[int]


class TimelineOut(SQLModel):
    items: list[TimelineItem]
    t0: float | None


class BestCurveOut(SQLModel):
    points: list[tuple[float, float]] = Field(description="[[seconds since the search started, best so far], ...]")


# ---- cluster -----------------------------------------------------------------------------------


class DeviceOut(SQLModel):
    id: str
    node: str
    kind: str
    memory_mb: float | None
    running: list[int]
    parked: list[int]


class PairOut(SQLModel):
    a: int
    b: int
    rate_a: float | None
    rate_b: float | None
    solo_a: float | None
    solo_b: float | None
    gain: float | None = Field(description="rate_a/solo_a + rate_b/solo_b: above 1 means packing pays")


class ClusterOut(SQLModel):
    devices: list[DeviceOut]
    pairs: list[PairOut]
    nodes: list[str]
    at: float | None


# ---- forks and lineage -------------------------------------------------------------------------

MAX_FORK_VALUES = 256  # as many as a space has parameters at most (`quanta.spec.MAX_PARAMETERS`)
MAX_FORK_STEPS = 10**12  # as `budget.max_steps`


class ForkRequest(BaseModel):
    """`POST /trials/{id}/fork`: new values for some of the search's mutable parameters (`set`, by dotted
    name; none: the same configuration) and `steps`, the mini-batches the new trial runs beyond the step
    it starts at (none: up to the search's `budget.max_steps`, as its parent)."""

    model_config = ConfigDict(extra="forbid")

    values: dict[str, Any] = PydanticField(
        default_factory=dict,
        alias="set",
        max_length=MAX_FORK_VALUES,
        description='mutable parameter -> its new value, e.g. {"lr": 0.001}',
    )
    steps: int | None = PydanticField(
        default=None, ge=1, le=MAX_FORK_STEPS, description="mini-batches to run beyond the fork's step"
    )


ForkStatus = Literal["pending", "copying", "done", "failed"]


class ForkOut(SQLModel):
    """A fork request as the controller carries it out: pending (not taken up yet), copying (trial
    `child_id` exists and waits for the parent's state), done (`fork_step` is where it starts), failed
    (`error` says why; the parent is as it was)."""

    id: int
    search_id: int
    parent_id: int
    child_id: int | None
    values: dict[str, Any]
    steps: int | None
    status: ForkStatus
    error: str | None
    fork_step: int | None
    requested_at: float
    finished_at: float | None

    @classmethod
    def from_row(cls, row: ForkRow, fork_step: int | None = None) -> ForkOut:
        assert row.id is not None
        status: ForkStatus = row.status if row.status in ("pending", "copying", "done") else "failed"  # type: ignore[assignment]
        return cls(
            id=row.id,
            search_id=row.search_id,
            parent_id=row.parent_id,
            child_id=row.child_id,
            values=dict(row.values or {}),
            steps=row.steps,
            status=status,
            error=row.error,
            fork_step=fork_step,
            requested_at=row.requested_at,
            finished_at=row.finished_at,
        )


class ConfigChangeOut(SQLModel):
    """A trial's mutable parameters changed at `step` to `values`: it started so from trial `source_id`'s
    state (`cause` "fork"), they were changed while it ran ("set"), or it took population member
    `source_id`'s state with them ("exploit")."""

    step: int
    at: float
    values: dict[str, Any]
    cause: str
    source_id: int | None

    @classmethod
    def from_row(cls, row: ConfigChangeRow) -> ConfigChangeOut:
        return cls(step=row.step, at=row.at, values=dict(row.values), cause=row.cause, source_id=row.source_id)


class LineageTrial(SQLModel):
    """One trial in its search's family tree: its parent and the parent's step it started from (none for a
    trial the searcher proposed), where it is now, and every change of its mutable parameters."""

    id: int
    number: int
    status: TrialStatus
    parent_id: int | None
    fork_step: int | None
    steps: int
    metric: float | None
    best_metric: float | None
    params: dict[str, Any]
    changes: list[ConfigChangeOut]


class LineageOut(SQLModel):
    """`GET /searches/{id}/lineage`: every trial of the search with its parent and fork step (a forest:
    the searcher's trials are its roots), the mutable parameters, and the fork requests made."""

    search_id: int
    mutable: list[str]
    trials: list[LineageTrial]
    forks: list[ForkOut]
