"""/trials/{id}: one trial with its learning curve and quanta history; stopping it."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import Authenticated, StoreDep
from app.api.models import TrialDetail, TrialOut
from app.api.routes.common import AUTH_ERRORS, CONFLICT, NOT_FOUND, TrialId, conflict, found
from app.db.queries import Conflict

router = APIRouter(prefix="/trials", tags=["trials"], dependencies=[Authenticated], responses=AUTH_ERRORS)


@router.get("/{trial_id}", response_model=TrialDetail, responses=NOT_FOUND)
def get_trial(trial_id: TrialId, store: StoreDep) -> TrialDetail:
    return found(store.trial_detail(trial_id), "trial", trial_id)


@router.post("/{trial_id}/stop", status_code=202, response_model=TrialOut, responses={**NOT_FOUND, **CONFLICT})
def stop_trial(trial_id: TrialId, store: StoreDep) -> TrialOut:
    """Stop one trial (the controller acts at its next tick); its search goes on."""
    try:
        out = store.stop_trial(trial_id)
    except Conflict as exc:
        raise conflict(str(exc)) from None
    return found(out, "trial", trial_id)
