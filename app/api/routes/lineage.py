"""/forks/{id}: a fork request as the controller carries it out; /searches/{id}/lineage: the search's
trials with their parents, fork steps and config changes. (Forking itself: `POST /trials/{id}/fork`.)"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.concurrency import run_in_threadpool

from quanta.api.deps import Authenticated, CurrentUser, StoreDep, sees
from quanta.api.routes.common import AUTH_ERRORS, MAX_ID, NOT_FOUND, SearchId, found, not_found
from quanta.api.routes.searches import visible
from quanta.db.public.lineage import ForkOut, LineageOut

router = APIRouter(tags=["lineage"], dependencies=[Authenticated], responses=AUTH_ERRORS)

ForkId = Annotated[int, Path(ge=1, le=MAX_ID, description="fork request id")]


@router.get("/forks/{fork_id}", response_model=ForkOut, responses=NOT_FOUND)
async def get_fork(fork_id: ForkId, store: StoreDep, user: CurrentUser) -> ForkOut:
    """A fork request: pending, copying (its trial waits for the parent's state), done (its trial runs
    from `fork_step`) or failed (`error` says why; the parent is as it was)."""
    out = await run_in_threadpool(store.fork_out, fork_id)
    if out is None or not sees(user, await run_in_threadpool(store.search_owner, out.search_id)):
        raise not_found("fork", fork_id)
    return out


@router.get("/searches/{search_id}/lineage", response_model=LineageOut, responses=NOT_FOUND)
async def search_lineage(search_id: SearchId, store: StoreDep, user: CurrentUser) -> LineageOut:
    """Every trial of the search with the trial it was forked from (`parent_id`, none for the searcher's
    own) and that trial's step then (`fork_step`), and every change of its mutable parameters with its step
    (`changes`); the search's mutable parameters and its fork requests."""
    await run_in_threadpool(visible, store, user, search_id)
    return found(await run_in_threadpool(store.lineage, search_id), "search", search_id)
