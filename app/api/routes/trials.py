"""/trials/{id}: one trial with its learning curve and quanta history; stopping it."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import Authenticated, CurrentUser, StoreDep, sees
from app.api.models import TrialDetail, TrialOut
from app.api.routes.common import AUTH_ERRORS, CONFLICT, NOT_FOUND, TrialId, conflict, found, not_found
from app.db.public import UserOut
from app.db.queries import Conflict

router = APIRouter(prefix="/trials", tags=["trials"], dependencies=[Authenticated], responses=AUTH_ERRORS)


def visible(store: StoreDep, user: UserOut, trial_id: int) -> None:
    """404 unless `user` may see the trial: one of their own searches' (any trial for an admin)."""
    if user.role != "admin" and not sees(user, store.trial_owner(trial_id)):
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
