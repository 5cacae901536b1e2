"""What is remembered: every SQLModel table (the migrations in app/db/migrations create them; a test
checks that they create exactly these), and the typed values some of them hold (`ClusterView`). The
database is the truth; the controller's memory is a cache of it that a restart rebuilds from here."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import JSON, Column, Index, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from quanta.status import SearchStatus, TrialStatus

# The user that owns what was there before users existed (searches of older databases, tokens stored
# before they had a user) and what `QUANTA_TOKEN` and `quanta run` act as. Every store has this admin.
FIRST_ADMIN = "admin"
ROLES = ("admin", "member", "viewer")  # quanta.db.public.users.Role says what each may do

# The ids of users, searches, trials, reports and tokens are never handed out twice, also after the
# newest row is deleted (an id names one thing for good: in URLs, logs, checkpoints and other users'
# bookmarks). SQLite needs AUTOINCREMENT for that (plain rowids re-use the highest freed one);
# PostgreSQL's sequences never go back.
NEVER_REUSED = {"sqlite_autoincrement": True}


class UserRow(SQLModel, table=True):
    """A user of the service. `weight` is their share of device time relative to other users;
    `max_alive_trials` and `max_devices` are quotas (0 = none)."""

    __tablename__ = "users"  # `user` is a reserved word in PostgreSQL
    __table_args__ = NEVER_REUSED
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    role: str = "member"  # one of ROLES
    weight: float = 1.0
    max_alive_trials: int = 0
    max_devices: int = 0
    created_at: float


class SearchRow(SQLModel, table=True):
    """A search. It belongs to the user `owner_id` (None: that user was deleted, or none of that name
    existed when the search was stored; no member owns it then, an admin sees it); `owner` keeps the
    name it was submitted under, for display. A user's name may be given to a new user after the first
    is deleted; an id never is."""

    __tablename__ = "search"
    __table_args__ = NEVER_REUSED
    id: int | None = Field(default=None, primary_key=True)
    name: str
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default=SearchStatus.QUEUED, index=True)  # a SearchStatus value
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    best_trial_id: int | None = None
    best_metric: float | None = None
    best_params: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    reached: bool = False
    reached_at: float | None = None
    seconds_to_target: float | None = None
    trials_created: int = 0
    command: str | None = Field(default=None, index=True)  # stop | pause | resume, for the controller
    error: str | None = Field(default=None, sa_column=Column(Text))
    owner: str = Field(default=FIRST_ADMIN, index=True)  # the name of the user who submitted it
    owner_id: int | None = Field(default=None, index=True)  # that user's id; None: the user is gone
    # Why the controller holds it: a queued search not started, or a running one making no new trials,
    # because its owner is at a quota (None when nothing holds it).
    waiting: str | None = None
    # What the controller warns about while it runs (its metric never reported, naming those that were).
    warning: str | None = Field(default=None, sa_column=Column(Text))
    # How its trials stand (`quanta.status.TrialCounts.as_dict`), as the controller last stored them: running
    # and parked apart, which the trials' rows do not tell (None: stored before the counts were).
    trial_counts: dict[str, int] | None = Field(default=None, sa_column=Column(JSON))
    # What its users write about it (`PATCH /searches/{id}`): short labels, distinct, in the order given
    # (`quanta.db.public.searches.SearchPatch` bounds them), and free text.
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    notes: str | None = Field(default=None, sa_column=Column(Text))
    # Seconds it spent ended before it was resumed (`finished_at` to the resume, summed): its time budget
    # (`budget.max_seconds`) counts the time since `started_at` less these.
    idle_seconds: float = Field(default=0.0, sa_column_kwargs={"server_default": "0"})


# A trial's number is unique in its search (two controllers on one database once numbered trials
# twice). Databases made before it get the index from a migration (app/db/migrations).
TRIAL_NUMBER_INDEX = "uq_trial_search_number"


class TrialRow(SQLModel, table=True):
    __tablename__ = "trial"
    __table_args__ = (Index(TRIAL_NUMBER_INDEX, "search_id", "number", unique=True), NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    search_id: int = Field(foreign_key="search.id", index=True)
    number: int  # 0, 1, 2, ... within its search (the searcher's trial id)
    params: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    vals: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default=TrialStatus.QUEUED, index=True)  # a TrialStatus value
    steps: int = 0
    metric: float | None = None  # last reported objective
    best_metric: float | None = None
    device_seconds: float = 0.0
    retries: int = 0
    devices: str = ""
    checkpoint_step: int | None = None
    error: str | None = Field(default=None, sa_column=Column(Text))
    # Why a stopped or killed trial ended early: for a killed one the policy's verdict ("P(reach target) ...").
    reason: str | None = Field(default=None, sa_column=Column(Text))
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    priority: float = 0.0
    p_reach: float | None = None
    command: str | None = Field(default=None, index=True)  # stop, for the controller
    # Lineage: the trial whose state this one started from (a fork), and that trial's step then. A fork's
    # `fork_step` is None while its parent's state is being taken: it does not run before it has it.
    parent_id: int | None = Field(default=None, index=True)
    fork_step: int | None = None
    # Its own step budget, when not its search's `budget.max_steps` (a fork's: its step then + its steps).
    max_steps: int | None = None


# One report row per (trial, step, attempt): see `ReportRow`. Databases made before it get the index from
# a migration, which first keeps only the first stored of each (trial, step) (app/db/migrations).
REPORT_KEY_INDEX = "uq_report_trial_step_attempt"


class ReportRow(SQLModel, table=True):
    """What a trial reported at `step` (mini-batches done), in its `attempt`: which process of the trial
    made it (0 for its first, one more for each process started after it, whatever started it: a
    restart after a crash or a lost server or node, a release, a move to another node; see
    `quanta.executor.runtime.child.claim_attempt`). A report is stored once: one delivered again (replayed
    from the trial's spool, redelivered after a failed round) lands on the row of its (trial, step,
    attempt), and a second report at the same step of one attempt adds its metrics to that row, later
    values winning (`quanta.db.reports.merge_report`). A step run again by a later process (restarted from
    an older checkpoint, or from the start) is a report of a later attempt: a row of its own, and readers
    show each step once, by its latest attempt (`quanta.db.reports.latest_per_step`)."""

    __tablename__ = "report"
    __table_args__ = (Index(REPORT_KEY_INDEX, "trial_id", "step", "attempt", unique=True), NEVER_REUSED)
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(foreign_key="trial.id", index=True)
    search_id: int = Field(index=True)
    step: int
    attempt: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    at: float
    # A non-finite value is stored as null, and what it was in `non_finite` ({"loss": "nan"}).
    metrics: dict[str, float | None] = Field(sa_column=Column(JSON, nullable=False))
    objective: float | None = None
    non_finite: dict[str, str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


FORK_STATES = ("pending", "copying", "done", "failed")
# A population's exploit (`quanta.controller.forks`) is a row of the same table: staging (the source's state
# is being written beside the target's checkpoint), staged (it is there, whole, taken at step `steps`),
# exploited (renamed over the target's checkpoint, the change stored) or abandoned (`error` says why; the
# target goes on from its own state).
EXPLOIT_STATES = ("exploit-staging", "exploit-staged", "exploited", "exploit-abandoned")


class ForkRow(SQLModel, table=True):
    """A request to fork trial `parent_id` (`POST /trials/{id}/fork`): a new trial of its search starts
    from its state (at its next boundary if it runs, else its last checkpoint) with `values` for some
    mutable parameters and a budget of `steps` more mini-batches (None: to the search's `max_steps`).
    `status`: pending (the controller has not taken it up), copying (trial `child_id` exists and waits
    for the state), done, failed (`error` says why; the parent is as it was).

    A population's exploit is kept in a row too, so that one in flight outlives a controller restart:
    `parent_id` is the source, `child_id` the exploiting trial itself (the target), `values` its new
    values, `steps` the step its staged state was taken at (None until staged), `status` one of
    `EXPLOIT_STATES`. The API's fork routes and the lineage's `forks` list show requests only."""

    __tablename__ = "fork"
    __table_args__ = NEVER_REUSED
    id: int | None = Field(default=None, primary_key=True)
    search_id: int = Field(index=True)
    parent_id: int = Field(index=True)
    child_id: int | None = None
    values: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    steps: int | None = None
    status: str = Field(default="pending", index=True)  # one of FORK_STATES
    error: str | None = Field(default=None, sa_column=Column(Text))
    requested_at: float
    requested_by: int | None = None  # the user's id
    finished_at: float | None = None


class ConfigChangeRow(SQLModel, table=True):
    """A trial's mutable parameters changed at `step` (its mini-batches done): `values` are the new ones.
    `cause`: "fork" (it started from `source_id`'s state with them), "set" (changed while it ran) or
    "exploit" (a population member took `source_id`'s state with them, `quanta.executor.policy.pbt`)."""

    __tablename__ = "config_change"
    __table_args__ = NEVER_REUSED
    id: int | None = Field(default=None, primary_key=True)
    search_id: int = Field(index=True)
    trial_id: int = Field(index=True)
    step: int
    at: float
    values: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    cause: str = "set"
    source_id: int | None = None


class QuantumRow(SQLModel, table=True):
    """One measured stretch of computing: which trial ran where, when, how fast, beside whom."""

    __tablename__ = "quantum"
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(index=True)
    search_id: int = Field(index=True)
    devices: str
    started_at: float
    ended_at: float
    steps: int
    rate: float
    rss_mb: float
    packed_with: str = ""


class LatencyRow(SQLModel, table=True):
    """Mechanism latencies (park, resume, start, migrate) in milliseconds."""

    __tablename__ = "latency"
    id: int | None = Field(default=None, primary_key=True)
    trial_id: int = Field(index=True)
    kind: str = Field(index=True)
    ms: float
    at: float


class PairRow(SQLModel, table=True):
    """Measured packing of two trials on one device: each one's rate beside the other."""

    __tablename__ = "pair"
    id: int | None = Field(default=None, primary_key=True)
    trial_a: int = Field(index=True)
    trial_b: int = Field(index=True)
    rate_a: float
    rate_b: float
    at: float


class IntentRow(SQLModel, table=True):
    """The actions of a round, recorded before they are applied (so a restarted controller knows
    what it asked for)."""

    __tablename__ = "intent"
    id: int | None = Field(default=None, primary_key=True)
    round_no: int = Field(index=True)
    at: float
    actions: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))


class ControllerRow(SQLModel, table=True):
    """The controller's own state, one row (id 1): the number of the last round it applied (rounds
    never repeat, also across restarts: node agents ignore a round they have applied) and what its
    policy returned in `Plan.state` last round (a restarted controller plans the same)."""

    __tablename__ = "controller"
    id: int = Field(default=1, primary_key=True)
    round_no: int = 0
    policy: str | None = None  # name of the policy that wrote `policy_state`
    policy_state: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # The judge's prediction cache (app/search/judge.py), saved with the policy's state.
    judge_state: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class ClusterViewRow(SQLModel, table=True):
    """What runs where, as the controller last published it, one row (id 1); read as a `ClusterView`."""

    __tablename__ = "cluster_view"
    id: int = Field(default=1, primary_key=True)
    at: float
    round_no: int = 0
    devices: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    pairs: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    notes: list[str] = Field(sa_column=Column(JSON, nullable=False))


class WarmStartRow(SQLModel, table=True):
    """The earlier searches' trials a search was warm-started with (`quanta.db.warm`), as they were when it
    started: a restarted controller rebuilds its searcher from this copy, so the replay is exact."""

    __tablename__ = "warm_start"
    search_id: int = Field(primary_key=True)
    items: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))


class SearchDeletionRow(SQLModel, table=True):
    """A search the API was asked to delete: the controller's host stops its trials, waits until their
    processes have exited, then deletes the search with this row (a restart resumes the deletion)."""

    __tablename__ = "search_deletion"
    search_id: int = Field(primary_key=True)
    requested_at: float


class TokenRow(SQLModel, table=True):
    """An API token of a user, stored as a keyed hash (HMAC-SHA256 with the server secret,
    app/db/secret.py); the token itself is never stored. `prefix`, its first characters, names it in
    listings and revocations. `scheme` "sha256" marks a digest an older Quanta stored unkeyed: it is
    re-keyed the first time the token is used (app/db/tokens.py)."""

    __tablename__ = "token"
    __table_args__ = NEVER_REUSED
    id: int | None = Field(default=None, primary_key=True)
    name: str = "default"  # a label
    token_hash: str = Field(index=True, unique=True)
    created_at: float
    user_name: str = Field(default=FIRST_ADMIN, index=True)  # for display: the user is `user_id`
    user_id: int | None = Field(default=None, index=True)  # None: its user is gone (it authenticates nobody)
    prefix: str = ""
    expires_at: float | None = None
    revoked_at: float | None = None
    scheme: str = "hmac"  # hmac | sha256 (legacy, unkeyed)


# ---- distributed mode (app/db/cluster.py: `DbCluster`) ------------------------------------------------


class NodeRow(SQLModel, table=True):
    """A node agent: its registration, heartbeat and residency (what runs there)."""

    __tablename__ = "node"
    name: str = Field(primary_key=True)
    incarnation: str
    devices: list[dict[str, Any]] = Field(sa_column=Column(JSON, nullable=False))
    beat: int = 0
    heartbeat_at: float = 0.0
    started_at: float = 0.0
    residency: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    seq: int = 0
    status: str = "up"  # up | dead | left


class NodeEventRow(SQLModel, table=True):
    """A node's events, append-only, numbered per node (`seq`)."""

    __tablename__ = "node_event"
    __table_args__ = (UniqueConstraint("node", "seq", name="uq_node_event_seq"),)
    id: int | None = Field(default=None, primary_key=True)
    node: str = Field(index=True)
    seq: int
    epoch: int = 0
    trial_id: int = Field(index=True)
    kind: str
    data: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))


class AssignmentRow(SQLModel, table=True):
    """Which node a trial is assigned to, and the assignment's epoch (fencing)."""

    __tablename__ = "assignment"
    trial_id: int = Field(primary_key=True)
    node: str
    epoch: int
    at: float


class AppliedRow(SQLModel, table=True):
    """A (node, trial, round) a node has applied: a redelivered task is ignored."""

    __tablename__ = "applied"
    __table_args__ = (UniqueConstraint("node", "trial_id", "round_no", name="uq_applied"),)
    id: int | None = Field(default=None, primary_key=True)
    node: str
    trial_id: int
    round_no: int
    at: float


class EventCursorRow(SQLModel, table=True):
    """Distributed mode's event cursor, per node (app/db/cluster.py): the last event seq the controller
    has handled (stored facts are idempotent up to here) and the last it has returned from `poll`
    (None: none yet)."""

    __tablename__ = "event_cursor"
    node: str = Field(primary_key=True)
    handled: int | None = None
    returned: int | None = None


# ---- typed values of the controller's tables --------------------------------------------------------


@dataclass(frozen=True)
class DevicePlacement:
    """One device in the published cluster view: the trials computing on it and those parked on it."""

    id: str
    node: str
    kind: str
    memory_mb: float | None
    running: tuple[int, ...] = ()
    parked: tuple[int, ...] = ()


@dataclass(frozen=True)
class PairRates:
    """Two trials measured packed on one device: each one's rate beside the other, and alone (if known)."""

    a: int
    b: int
    rate_a: float | None
    rate_b: float | None
    solo_a: float | None = None
    solo_b: float | None = None


@dataclass(frozen=True)
class ClusterView:
    """What the controller published at `at` (its clock) in round `round_no`: devices with their
    placements, measured pairs, and the plan's notes."""

    at: float
    devices: tuple[DevicePlacement, ...]
    pairs: tuple[PairRates, ...] = ()
    notes: tuple[str, ...] = ()
    round_no: int = 0

    @classmethod
    def idle(cls, at: float, devices: Iterable[Any], round_no: int = 0) -> ClusterView:
        """The devices (anything with `id`, `node`, `kind`, `memory_mb`) with nothing on them."""
        return cls(at, tuple(DevicePlacement(d.id, d.node, d.kind, d.memory_mb) for d in devices), round_no=round_no)

    def to_row(self) -> ClusterViewRow:
        return ClusterViewRow(
            id=1,
            at=self.at,
            round_no=self.round_no,
            devices=[{**asdict(d), "running": list(d.running), "parked": list(d.parked)} for d in self.devices],
            pairs=[asdict(p) for p in self.pairs],
            notes=list(self.notes),
        )

    @classmethod
    def from_row(cls, row: ClusterViewRow) -> ClusterView:
        return cls(
            at=row.at,
            round_no=row.round_no,
            devices=tuple(
                DevicePlacement(
                    id=d["id"],
                    node=d.get("node", "local"),
                    kind=d.get("kind", ""),
                    memory_mb=d.get("memory_mb"),
                    running=tuple(d.get("running") or ()),
                    parked=tuple(d.get("parked") or ()),
                )
                for d in row.devices
            ),
            pairs=tuple(PairRates(**p) for p in row.pairs),
            notes=tuple(row.notes),
        )


# Every table above: what the migrations build (a test compares them), and what an empty database is
# given at once (app/db/migrate.py) before it is stamped with the newest revision.
TABLES = (
    UserRow, SearchRow, TrialRow, ReportRow, QuantumRow, LatencyRow, PairRow, IntentRow, ControllerRow,
    ClusterViewRow, WarmStartRow, SearchDeletionRow, TokenRow, NodeRow, NodeEventRow, AssignmentRow, AppliedRow,
    EventCursorRow, ForkRow, ConfigChangeRow,
)  # fmt: skip
