"""/cluster: devices, what runs or is parked on each, and measured packed pairs."""

from __future__ import annotations

from fastapi import APIRouter

from quanta.api.deps import Authenticated, CurrentUser, StoreDep, owner_filter
from quanta.api.models import ClusterOut
from quanta.api.routes.common import AUTH_ERRORS

router = APIRouter(tags=["cluster"], dependencies=[Authenticated], responses=AUTH_ERRORS)


@router.get("/cluster", response_model=ClusterOut)
def get_cluster(store: StoreDep, user: CurrentUser) -> ClusterOut:
    """The devices and what runs or is parked on each: every trial for an admin or a viewer, a member's own only."""
    return store.cluster_out(owner_filter(user))
