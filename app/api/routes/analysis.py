"""/searches/{id}/importance and /landscape: what the finished trials say about the parameters
(`quanta.db.analysis`: a random forest's permutation importance and partial dependence)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool

from quanta.api.deps import Authenticated, CurrentUser, StoreDep
from quanta.api.models import Message
from quanta.api.routes.common import AUTH_ERRORS, NOT_FOUND, SearchId, found
from quanta.api.routes.searches import visible
from quanta.db.analysis import FitCache, ImportanceOut, LandscapeOut, importance_out, landscape_out


def fit_cache(request: Request) -> FitCache:
    """The app's cache of fitted forests (`create_app` makes it): a result is fitted again only when the
    search's finished trials changed (`quanta.db.analysis.FitCache`)."""
    cache: FitCache = request.app.state.fit_cache
    return cache


router = APIRouter(prefix="/searches", tags=["analysis"], dependencies=[Authenticated], responses=AUTH_ERRORS)

Param = Annotated[
    str, Query(min_length=1, max_length=500, description="a flattened parameter, e.g. optimizer.momentum")
]
OptionalParam = Annotated[str | None, Query(min_length=1, max_length=500, description="a second parameter (contour)")]


@router.get(
    "/{search_id}/importance",
    response_model=ImportanceOut,
    responses={**NOT_FOUND, 422: {"model": Message, "description": "an objective the search does not have"}},
)
async def search_importance(
    search_id: SearchId,
    request: Request,
    store: StoreDep,
    user: CurrentUser,
    objective: Annotated[
        str | None,
        Query(min_length=1, max_length=500, description="one of the search's objectives (default: the first)"),
    ] = None,
) -> ImportanceOut:
    """Each parameter's importance: the permutation importance of a random forest fitted on the finished
    trials (parameters -> last reported metric; completed trials, trials stopped when their search ended
    with their progress as a feature, killed ones only if they had run all their steps), normalised to
    sum 1, most important first. With fewer than 4 such trials `params` is empty and `note` says so. A
    search with several objectives has one per objective (`objective`; another objective's value of a trial
    is that of its last point, as /pareto reads them); `objectives` lists them."""
    await run_in_threadpool(visible, store, user, search_id)
    try:
        out = await run_in_threadpool(importance_out, store, search_id, fit_cache(request), objective)
    except KeyError as exc:
        raise HTTPException(422, f"{exc.args[0]!r} is not an objective of search {search_id}") from None
    return found(out, "search", search_id)


@router.get(
    "/{search_id}/landscape",
    response_model=LandscapeOut,
    responses={**NOT_FOUND, 422: {"model": Message, "description": "a parameter the space does not have"}},
)
async def search_landscape(
    search_id: SearchId, request: Request, store: StoreDep, user: CurrentUser, x: Param, y: OptionalParam = None
) -> LandscapeOut:
    """The metric predicted over a grid of `x` (and `y`): the random forest's partial dependence,
    averaged over the trials' other parameters, at full training (a contour plot of two parameters, a curve
    of one), with the trials it was fitted on as points."""
    await run_in_threadpool(visible, store, user, search_id)
    try:
        out = await run_in_threadpool(landscape_out, store, search_id, x, y, fit_cache(request))
    except KeyError as exc:
        raise HTTPException(422, f"{exc.args[0]!r} is not a parameter of search {search_id}'s space") from None
    return found(out, "search", search_id)
