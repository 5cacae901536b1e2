"""/searches: create, list, read, control (stop, pause, resume and extend), tag, annotate and delete
searches, and the per-search views the dashboard draws (trials, curves, timeline, best-so-far, Pareto front)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from quanta.api.deps import Authenticated, CurrentUser, SettingsDep, StoreDep, owner_filter, sees
from quanta.api.models import (
    BestCurveOut,
    CurvesOut,
    Deleting,
    Message,
    SearchList,
    SearchOut,
    SpecErrors,
    TimelineOut,
    TrialList,
)
from quanta.api.routes.common import (
    AUTH_ERRORS,
    CONFLICT,
    NOT_FOUND,
    Limit,
    Offset,
    SearchId,
    conflict,
    found,
    not_found,
)
from quanta.api.settings import Settings
from quanta.db.errors import BudgetError, Conflict
from quanta.db.export import MEDIA_TYPES, ExportError, Format, render, trial_table
from quanta.db.pareto_view import MAX_POINTS, ParetoOut, pareto_out
from quanta.db.public.searches import TAG_PATTERN, SearchPatch, SearchResume
from quanta.db.public.users import UserOut
from quanta.db.searches import SearchCommand, SearchSort
from quanta.db.trials import TrialSort
from quanta.db.warm import WarmStartError, check_warm_start
from quanta.import_check import check_import
from quanta.spec import MAX_DEPTH, SearchSpec, SpecError, decode_spec_text, nesting_problem, parse_spec
from quanta.status import SearchStatus, TrialStatus
from quanta.trainable_ref import DOCS_SERVING, file_ref_problem, is_file_ref

router = APIRouter(prefix="/searches", tags=["searches"], dependencies=[Authenticated], responses=AUTH_ERRORS)


def visible(store: StoreDep, user: UserOut, search_id: int) -> None:
    """404 unless the search exists and `user` may see it (their own, or any for an admin or a viewer): another
    user's search answers exactly as a missing one."""
    if not sees(user, store.search_owner(search_id)):
        raise not_found("search", search_id)


JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain", "")

_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a search spec as JSON, or as YAML text (application/yaml or text/plain)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/SearchSpec"}},
            "application/yaml": {"schema": {"type": "string"}},
            "text/plain": {"schema": {"type": "string"}},
        },
    }
}


def _spec_error(errors: list[tuple[str, str]]) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [{"loc": loc, "msg": msg} for loc, msg in errors])


def _non_finite(data: Any, path: str = "") -> str | None:
    """Dotted path of the first NaN or infinite number in `data` (JSON cannot carry them back)."""
    if isinstance(data, float) and not math.isfinite(data):
        return path or "spec"
    if isinstance(data, dict):
        for k, v in data.items():
            found = _non_finite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    if isinstance(data, list):
        for i, v in enumerate(data):
            found = _non_finite(v, f"{path}[{i}]")
            if found:
                return found
    return None


async def read_capped(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 before it is read when Content-Length says it is larger than
    `limit`, and as soon as more than `limit` bytes have arrived otherwise (chunked bodies): a large
    body is never held in memory."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isascii() or not declared.isdigit():
            raise HTTPException(status.HTTP_400_BAD_REQUEST, "Content-Length must be a number of bytes")
        if int(declared) > limit:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"spec larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"spec larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def read_spec(body: bytes, content_type: str, settings: Settings) -> SearchSpec:
    """Validate a posted spec: 415 for other media types, 422 naming each bad field, 403 when the
    trainable's module is not allowed. Last, the trainable's module is imported in a process of its own
    (`check_import`, bounded by `import_check_s`): 422 when that fails (a package it needs is missing,
    named with the Quanta extra that provides it)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in JSON_TYPES + YAML_TYPES:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"send the spec as application/json or application/yaml, not {media}",
        )
    if len(body) > settings.max_spec_bytes:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"spec larger than {settings.max_spec_bytes} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _spec_error([("spec", "not UTF-8 text")]) from None
    try:
        data = decode_spec_text(text, "json" if media in JSON_TYPES else "yaml")
    except SpecError as exc:
        raise _spec_error(exc.errors) from None
    too_deep = nesting_problem(data)  # first: the walks below recurse
    if too_deep is not None:
        raise _spec_error([(too_deep, f"nested more than {MAX_DEPTH} levels deep")])
    bad = _non_finite(data)
    if bad:
        raise _spec_error([(bad, "must be a finite number")])
    try:
        spec = parse_spec(data)
    except SpecError as exc:
        raise _spec_error(exc.errors) from None
    except (TypeError, ValueError, RecursionError) as exc:  # a value the validators did not foresee
        raise _spec_error([("spec", str(exc) or type(exc).__name__)]) from None
    if is_file_ref(spec.trainable):  # a path means something only beside a spec file, under `quanta run`
        raise _spec_error([("trainable", file_ref_problem(spec.trainable))])
    if not settings.allows(spec.module):
        allowed = ", ".join(repr(p) for p in settings.allowlist) or "(none)"
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"trainable '{spec.trainable}' is not allowed: its module must start with one of {allowed} "
            f"(the server's QUANTA_TRAINABLE_ALLOWLIST; to serve your own trainables, start the server with "
            f"their folder on PYTHONPATH and their module in QUANTA_TRAINABLE_ALLOWLIST, as {DOCS_SERVING} "
            "shows)",
        )
    problem = spec.trainable_problem()  # found without importing it into this process
    if problem is not None:
        raise _spec_error([("trainable", problem)])
    if settings.import_check_s > 0:  # imported once in a process of its own: a missing package fails every trial
        failed = check_import(spec.module, settings.import_check_s)
        if failed is not None:
            raise _spec_error([("trainable", failed.sentence())])
    return spec


def check_warm(store: StoreDep, user: UserOut, spec: SearchSpec) -> None:
    """404 for a search of `search.warm_start_from` that does not exist or that `user` may not see (as a
    missing one), 422 naming the first parameter where one's space differs."""
    for i, earlier in enumerate(spec.search.warm_start_from):
        if not sees(user, store.search_owner(earlier)):
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"search.warm_start_from[{i}]: search {earlier} does not exist"
            )
    try:
        check_warm_start(store, spec)
    except WarmStartError as exc:
        if exc.missing:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        raise _spec_error([(exc.field, exc.reason)]) from None


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SearchOut,
    openapi_extra=_SPEC_BODY,
    responses={
        403: {"model": Message, "description": "trainable not in the allowlist"},
        413: {"model": Message, "description": "spec too large"},
        415: {"model": Message, "description": "unsupported media type"},
        404: {"model": Message, "description": "a search named in search.warm_start_from does not exist"},
        422: {"model": SpecErrors, "description": "invalid spec: each error names its field"},
    },
)
async def create_search(request: Request, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> SearchOut:
    """Submit a search spec; it belongs to the caller. It is stored as `queued`; the controller starts it
    at its next tick (or holds it queued while its owner is at a quota, saying so in `waiting`).
    `search.warm_start_from` must name searches the caller may see (404 otherwise) with the same space and
    metric (422 naming the first parameter that differs)."""
    body = await read_capped(request, settings.max_spec_bytes)
    spec = await run_in_threadpool(read_spec, body, request.headers.get("content-type", ""), settings)
    await run_in_threadpool(check_warm, store, user, spec)
    return await run_in_threadpool(
        functools.partial(store.submit_search, spec, time.time(), user.name, owner_id=user.id)
    )


@router.get("", response_model=SearchList)
def list_searches(
    store: StoreDep,
    user: CurrentUser,
    offset: Offset = 0,
    limit: Limit = 100,
    sort: SearchSort = "-id",
    status: SearchStatus | None = None,
    owner: Annotated[
        str | None, Query(max_length=64, description="only this user's searches (a member sees only their own)")
    ] = None,
    tag: Annotated[
        str | None, Query(max_length=40, pattern=TAG_PATTERN, description="only the searches with this tag")
    ] = None,
) -> SearchList:
    """Searches, newest first by default: the caller's own, or everyone's for an admin or a viewer. `owner` names a
    current user (a deleted user's searches belong to nobody, whatever name they show); `tag` is one of the
    searches' tags, exactly."""
    owner_id = owner_filter(user)
    if owner is not None and owner_id is None:
        named = store.user(owner)
        if named is None:
            return SearchList(items=[], total=0)
        owner_id = named.id
    elif owner is not None and owner != user.name:
        return SearchList(items=[], total=0)
    items, total = store.search_page(offset, limit, sort, status, owner_id, tag)
    return SearchList(items=items, total=total)


@router.get("/{search_id}", response_model=SearchOut, responses=NOT_FOUND)
def get_search(search_id: SearchId, store: StoreDep, user: CurrentUser) -> SearchOut:
    visible(store, user, search_id)
    return found(store.search_out(search_id), "search", search_id)


def _command(store: StoreDep, user: UserOut, search_id: int, command: SearchCommand) -> SearchOut:
    visible(store, user, search_id)
    try:
        out = store.command_search(search_id, command, time.time())
    except Conflict as exc:
        raise conflict(str(exc)) from None
    return found(out, "search", search_id)


@router.post("/{search_id}/stop", status_code=202, response_model=SearchOut, responses={**NOT_FOUND, **CONFLICT})
def stop_search(search_id: SearchId, store: StoreDep, user: CurrentUser) -> SearchOut:
    """Stop the search and its trials (the controller acts at its next tick)."""
    return _command(store, user, search_id, "stop")


@router.post("/{search_id}/pause", status_code=202, response_model=SearchOut, responses={**NOT_FOUND, **CONFLICT})
def pause_search(search_id: SearchId, store: StoreDep, user: CurrentUser) -> SearchOut:
    """Park the search's trials and start no new ones until resumed."""
    return _command(store, user, search_id, "pause")


@router.patch("/{search_id}", response_model=SearchOut, responses=NOT_FOUND)
def patch_search(search_id: SearchId, body: SearchPatch, store: StoreDep, user: CurrentUser) -> SearchOut:
    """Set the search's `tags` (the whole list, at most 20; `[]` removes them) and `notes` (`""` or null
    removes them; at most 4000 characters); fields left out stay as they are. A value out of bounds is a 422
    naming the field. Its owner's or an admin's; a viewer's PATCH is a 403."""
    visible(store, user, search_id)
    return found(store.patch_search(search_id, body), "search", search_id)


@router.post(
    "/{search_id}/resume",
    status_code=202,
    response_model=SearchOut,
    responses={**NOT_FOUND, **CONFLICT, 422: {"description": "a budget out of bounds, naming the field"}},
)
def resume_search(
    search_id: SearchId, store: StoreDep, user: CurrentUser, body: SearchResume | None = None
) -> SearchOut:
    """Resume a paused, stopped or completed search, or extend one: the body's `max_trials` and
    `max_seconds` are added to its budget (a running search takes them at once). A stopped or completed
    search is taken up again by the controller at its next tick: its searcher goes on from every trial so
    far (new configurations only), the trials its end stopped go on from their checkpoints, and the time
    it spent ended is not counted against its time budget; one that ended at its target goes on to its
    budget. 409 when it is queued or failed, when it is running and no budget is added, and when it would
    end again at once (its time or trials spent: add some)."""
    visible(store, user, search_id)
    more = body or SearchResume()
    try:
        out = store.resume_search(search_id, time.time(), more_trials=more.max_trials, more_seconds=more.max_seconds)
    except Conflict as exc:
        raise conflict(str(exc)) from None
    except BudgetError as exc:
        detail = [{"loc": ["body", exc.field], "msg": exc.reason, "type": "value_error"}]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail) from None
    return found(out, "search", search_id)


@router.delete(
    "/{search_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={**NOT_FOUND, 202: {"model": Deleting, "description": "trials still stopping; deleted once they exit"}},
)
async def delete_search(search_id: SearchId, store: StoreDep, settings: SettingsDep, user: CurrentUser) -> Response:
    """Stop the search's trials, then delete it with everything recorded about it. 204 once deleted;
    202 when its trials have not exited within the server's wait (the deletion completes later)."""
    await run_in_threadpool(visible, store, user, search_id)
    if await run_in_threadpool(store.delete_if_queued, search_id):
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    await run_in_threadpool(store.request_delete, search_id, time.time())
    with contextlib.suppress(Conflict):
        await run_in_threadpool(store.command_search, search_id, "stop", time.time())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.delete_wait_s
    while await run_in_threadpool(store.has_search, search_id):
        if loop.time() >= deadline:
            return JSONResponse(Deleting(id=search_id).model_dump(), status_code=status.HTTP_202_ACCEPTED)
        await asyncio.sleep(0.2)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


_EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "a page of trials; with `format`, every trial as one file (csv, json or parquet)",
        "content": {
            "text/csv": {"schema": {"type": "string"}},
            MEDIA_TYPES["parquet"]: {"schema": {"type": "string", "format": "binary"}},
        },
    },
    501: {"model": Message, "description": "format=parquet, and pyarrow is not installed on the server"},
}


@router.get("/{search_id}/trials", response_model=TrialList, responses={**NOT_FOUND, **_EXPORT_RESPONSES})
def list_trials(
    search_id: SearchId,
    store: StoreDep,
    user: CurrentUser,
    offset: Offset = 0,
    limit: Limit = 100,
    sort: TrialSort = "id",
    status: TrialStatus | None = None,
    format: Annotated[
        Format | None, Query(description="export every trial (paging and filters ignored): csv, json or parquet")
    ] = None,
) -> TrialList | Response:
    """The search's trials, paged. `metric` sorts by the last reported objective (trials without
    one last); prefix `-` for descending. With `format`, every trial as a file instead: one row per
    trial with its parameters flattened into `params.*` columns (`quanta.db.export`); a search without
    trials gives a header and no rows."""
    visible(store, user, search_id)
    if format is not None:
        table = trial_table(store, search_id)
        if table is None:
            raise not_found("search", search_id)
        try:
            body = render(table, format)
        except ExportError as exc:
            raise HTTPException(501, str(exc)) from None  # (`status` is the filter argument here)
        media = MEDIA_TYPES[format] + ("; charset=utf-8" if format != "parquet" else "")
        disposition = f'attachment; filename="search-{search_id}-trials.{format}"'
        return Response(body, media_type=media, headers={"Content-Disposition": disposition})
    items, total = store.trial_page(search_id, offset, limit, sort, status)
    return TrialList(items=items, total=total)


@router.get("/{search_id}/curves", response_model=CurvesOut, responses=NOT_FOUND)
def search_curves(
    search_id: SearchId,
    store: StoreDep,
    user: CurrentUser,
    max_points: Annotated[int, Query(ge=2, le=100_000, description="per trial, evenly thinned")] = 1000,
) -> CurvesOut:
    """Every trial's learning curve (step, objective) in one call."""
    visible(store, user, search_id)
    return store.curves(search_id, max_points)


@router.get("/{search_id}/timeline", response_model=TimelineOut, responses=NOT_FOUND)
def search_timeline(search_id: SearchId, store: StoreDep, user: CurrentUser) -> TimelineOut:
    """Every measured quantum of the search's trials: which devices, when, packed beside whom."""
    visible(store, user, search_id)
    return found(store.timeline(search_id), "search", search_id)


@router.get("/{search_id}/best", response_model=BestCurveOut, responses=NOT_FOUND)
def search_best(search_id: SearchId, store: StoreDep, user: CurrentUser) -> BestCurveOut:
    """Best objective so far versus seconds since the search started (one point per improvement)."""
    visible(store, user, search_id)
    return found(store.best_curve(search_id), "search", search_id)


@router.get("/{search_id}/pareto", response_model=ParetoOut, responses=NOT_FOUND)
def search_pareto(
    search_id: SearchId,
    store: StoreDep,
    user: CurrentUser,
    max_points: Annotated[
        int,
        Query(
            ge=0,
            le=100_000,
            description="points sent (past it, the front and each trial's last point, the rest thinned; 0: none)",
        ),
    ] = MAX_POINTS,
) -> ParetoOut:
    """The search's trade-offs, read from its stored reports (`quanta.db.pareto_view`): its objectives,
    constraints and reference point (the spec's, else derived from every point: `reference_derived`); the
    front (feasible non-dominated points, each with its trial, step, objective values and configuration);
    every point with its kind (front, dominated, infeasible, non_finite); the counts of points and trials of
    each kind; and the hypervolume now and over time. A single-objective search answers the same way: its
    front is its best point."""
    visible(store, user, search_id)
    return found(pareto_out(store, search_id, max_points), "search", search_id)
