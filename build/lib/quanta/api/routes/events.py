"""/events: live updates as server-sent events (`search`, `trial`, `report`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from quanta.api.deps import SettingsDep, StoreDep, StreamCaller, owner_filter, sees, stream_caller
from quanta.api.events import Poller, SharedReads
from quanta.api.routes.common import AUTH_ERRORS, MAX_ID, NOT_FOUND, not_found
from quanta.api.settings import Settings
from quanta.api.streams import StreamSlots
from quanta.db.store import Store

# How often an open stream checks that its token is still valid: a revoked token's stream ends within this
# (and the shared reads' freshness, half the poll interval).
RECHECK_S = 0.5

router = APIRouter(tags=["events"], responses=AUTH_ERRORS)


@router.get(
    "/events",
    response_class=StreamingResponse,
    responses={
        **NOT_FOUND,
        200: {"content": {"text/event-stream": {}}, "description": "an event stream"},
        429: {"description": "too many open event streams (per token or in all)"},
    },
)
async def events(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    caller: Annotated[StreamCaller, Depends(stream_caller)],
    search_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only this search")] = None,
    max_seconds: Annotated[float | None, Query(gt=0, le=86_400, description="end the stream after this")] = None,
    last_event_id: Annotated[str | None, Header(description="resume after this report id")] = None,
) -> StreamingResponse:
    """Server-sent events: `search` (a SearchSummary whose status, best, progress, trial counts or warning
    changed), `trial` (a TrialOut whose status, steps or metric changed) and `report` (a new report row;
    its event id is the report id, so a reconnecting EventSource resumes where it left off). Auth by
    header or `?token=`. A member gets the events of their own searches only; the stream ends when its
    token is revoked or expires."""
    resume = _event_id(last_event_id)
    if search_id is not None and not sees(caller.user, await run_in_threadpool(store.search_owner, search_id)):
        raise not_found("search", search_id)
    reads, limiter = _shared(request, settings, store)
    poller = Poller(reads, search_id, resume, owner_id=owner_filter(caller.user))
    limit = min(max_seconds or settings.events_max_s, settings.events_max_s)
    stopping = getattr(request.app.state, "stopping", None)  # a threading.Event set on shutdown
    slots = _slots(request, settings)
    header = request.headers.get("authorization", "")
    given = header.partition(" ")[2] if header.lower().startswith("bearer ") else request.query_params.get("token")
    key = StreamSlots.key(given)
    refused = slots.take(key)
    if refused is not None:
        raise HTTPException(429, refused, headers={"Retry-After": "5"})
    held = [True]

    def give_back() -> None:
        if held[0]:
            held[0] = False
            slots.give_back(key)

    async def stream() -> AsyncIterator[str]:
        try:
            async for chunk in _stream():
                yield chunk
        finally:
            give_back()

    async def _stream() -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        quiet_since = checked = loop.time()
        yield "retry: 2000\n: connected\n\n"
        while True:
            if loop.time() - checked >= RECHECK_S:
                checked = loop.time()
                if await anyio.to_thread.run_sync(reads.verify, caller.token, limiter=limiter) is None:
                    return
            chunks = await anyio.to_thread.run_sync(poller.poll, limiter=limiter)
            for chunk in chunks:
                yield chunk
            now = loop.time()
            if chunks:
                quiet_since = now
            elif now - quiet_since >= settings.events_keepalive_s:
                quiet_since = now
                yield ": keepalive\n\n"
            if now >= end or (stopping is not None and stopping.is_set()) or await request.is_disconnected():
                return
            # Every stream polls at the same instants (multiples of the interval), so that their reads
            # are shared (`SharedReads`) instead of spread over the interval.
            every = settings.events_poll_s
            await asyncio.sleep(min(every - now % every, max(0.0, end - now)))

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(give_back),  # also when the body was never iterated
    )


# Threads the streams' polls may take at once, apart from the API's pool: with their reads shared most polls
# only format events, and however many streams are open they never take the threads requests need.
STREAM_THREADS = 4


def _shared(request: Request, settings: Settings, store: Store) -> tuple[SharedReads, anyio.CapacityLimiter]:
    """The app's shared stream reads and the streams' own thread limiter (made on first use, in the loop)."""
    state = request.app.state
    if getattr(state, "event_reads", None) is None:
        state.event_reads = SharedReads(store, settings.events_poll_s / 2)
        state.event_threads = anyio.CapacityLimiter(STREAM_THREADS)
    return state.event_reads, state.event_threads


def _slots(request: Request, settings: Settings) -> StreamSlots:
    """The app's stream counter (made on first use, with the settings' caps)."""
    slots = getattr(request.app.state, "event_slots", None)
    if slots is None:
        slots = StreamSlots(settings.events_max_streams, settings.events_max_streams_per_token)
        request.app.state.event_slots = slots
    return slots


def _event_id(value: str | None) -> int | None:
    """A `Last-Event-ID` is a report id: 1 to 18 ASCII digits (so it fits a 64-bit integer). Anything
    else is a 400, never a 500 or a broken stream (`str.isdigit` accepts '²' and other digits)."""
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 18):
        raise HTTPException(400, "Last-Event-ID must be a report id (1 to 18 digits)")
    return int(text)
