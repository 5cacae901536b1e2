"""/trials/{id}: one trial with its learning curve and quanta history; its output (logs); stopping it;
forking it."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import PlainTextResponse

from quanta.api.deps import Authenticated, CurrentUser, SettingsDep, StoreDep, reads_all, sees
from quanta.api.models import SpecErrors, TrialDetail, TrialOut
from quanta.api.routes.common import AUTH_ERRORS, CONFLICT, NOT_FOUND, TrialId, conflict, found, not_found
from quanta.db.errors import Conflict
from quanta.db.launch import trial_log_path
from quanta.db.lineage import fork_state_problem
from quanta.db.public.lineage import ForkOut, ForkRequest
from quanta.db.public.readable import parsed_spec
from quanta.db.public.users import UserOut
from quanta.executor.runtime.trial_log import LOG_CAP_BYTES
from quanta.executor.runtime.trial_log import tail as log_tail
from quanta.search.space import SpaceError
from quanta.status import SearchStatus

router = APIRouter(prefix="/trials", tags=["trials"], dependencies=[Authenticated], responses=AUTH_ERRORS)


def visible(store: StoreDep, user: UserOut, trial_id: int) -> None:
    """404 unless `user` may see the trial: one of their own searches' (any trial for an admin or a viewer)."""
    if not reads_all(user) and not sees(user, store.trial_owner(trial_id)):
        raise not_found("trial", trial_id)


@router.get("/{trial_id}", response_model=TrialDetail, responses=NOT_FOUND)
def get_trial(trial_id: TrialId, store: StoreDep, user: CurrentUser) -> TrialDetail:
    visible(store, user, trial_id)
    return found(store.trial_detail(trial_id), "trial", trial_id)


@router.post("/{trial_id}/stop", status_code=202, response_model=TrialOut, responses={**NOT_FOUND, **CONFLICT})
def stop_trial(trial_id: TrialId, store: StoreDep, user: CurrentUser) -> TrialOut:
    """Stop one trial (the controller acts at its next tick); its search goes on."""
    visible(store, user, trial_id)
    try:
        out = store.stop_trial(trial_id)
    except Conflict as exc:
        raise conflict(str(exc)) from None
    return found(out, "trial", trial_id)


@router.get(
    "/{trial_id}/logs",
    response_class=PlainTextResponse,
    responses={**NOT_FOUND, 200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
def trial_logs(
    trial_id: TrialId,
    store: StoreDep,
    settings: SettingsDep,
    user: CurrentUser,
    tail: Annotated[int, Query(ge=1, le=LOG_CAP_BYTES, description="bytes from the end at most")] = 64 * 1024,
) -> PlainTextResponse:
    """The trial's stdout and stderr as the service keeps them (under its workdir, bounded in size):
    the last `tail` bytes, from a line start. Empty when the trial has written nothing (or not started)."""
    visible(store, user, trial_id)
    row = store.trial(trial_id)
    if row is None:
        raise not_found("trial", trial_id)
    data = log_tail(trial_log_path(settings.workdir, row.search_id, trial_id), tail) or b""
    return PlainTextResponse(data.decode("utf-8", errors="replace"))


@router.post(
    "/{trial_id}/fork",
    status_code=202,
    response_model=ForkOut,
    responses={
        **NOT_FOUND,
        **CONFLICT,
        422: {"model": SpecErrors, "description": "a parameter that is not mutable, or a value it does not take"},
    },
)
def fork_trial(
    trial_id: TrialId, body: ForkRequest, store: StoreDep, settings: SettingsDep, user: CurrentUser
) -> ForkOut:
    """Start a new trial of the trial's search from the trial's state (taken at its next mini-batch
    boundary if it runs or is parked, else its last checkpoint), with new values for some of the search's
    mutable parameters (`set`) and `steps` more mini-batches. The controller carries the request out at
    its next tick (`GET /forks/{id}` follows it); the search's policy schedules the new trial. 422 for a
    parameter that is not mutable or a value its dimension does not take, 409 when the search is not
    running or paused or the trial's state no longer exists (the reason says which)."""
    visible(store, user, trial_id)
    row = store.trial(trial_id)
    search = store.search(row.search_id) if row is not None else None
    if row is None or search is None:
        raise not_found("trial", trial_id)
    spec = parsed_spec(search)
    if spec is None:
        raise conflict(f"search {search.id}'s stored spec no longer parses: its trials cannot be forked")
    try:
        values = spec.checked_overrides(body.values)
    except SpaceError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [{"loc": exc.path, "msg": exc.reason}]) from None
    if search.status not in (SearchStatus.RUNNING, SearchStatus.PAUSED):
        raise conflict(f"search {search.id} is {search.status}: trials are forked in a running or paused search")
    why = fork_state_problem(row, settings.workdir)
    if why is not None:
        raise conflict(why)
    return found(store.request_fork(trial_id, values, body.steps, time.time(), user.id), "trial", trial_id)
