"""`SearcherHost`: a search's searcher on a thread of its own, so that building and asking it never holds
the controller's tick.

Building a searcher and asking it take time that grows with the search space and with its history (TPE
on 2,000 parameters: seconds to build, most of a second per ask). On the controller's thread that time
stalls every search's scheduling, and `/healthz` with it. A host builds its searcher and runs every call
on it on one thread, in the order the calls were made, so the searcher itself needs no locks:

- `request(number)` starts an ask and returns at once; `ready()` hands back the suggestions finished so
  far, in number order (the tick creates their trials), `outstanding()` counts those still coming, and
  `wait(timeout)` waits for them a bounded time.
- `tell` and `observe` are queued and return at once (the recorder and the book call them on the tick).
- `ask` is the `Searcher` protocol's: a request waited for.

A failed build or ask is kept: `failure()` returns it, and the book fails that search alone. `on_ready`
is called on the host's thread after each finished request (the controller's wake-up). Closing drops
what is still queued and ends the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from quanta.search.searcher import Searcher, Suggestion

log = logging.getLogger("quanta.controller")

_Call = Callable[[Searcher], Any]


class SearcherHost:
    """Implements `Searcher` (`ask`, `tell`, `observe`) over the searcher `build()` makes, on a daemon
    thread named `name`. Not for several callers: the controller's thread makes every call."""

    def __init__(self, build: Callable[[], Searcher], name: str, on_ready: Callable[[], None] | None = None):
        self._calls: queue.SimpleQueue[tuple[Future[Any], _Call, bool] | None] = queue.SimpleQueue()
        self._searcher: Searcher | None = None
        self._pending: deque[tuple[int, Future[Suggestion]]] = deque()
        self._next = 0  # the number after the last one requested
        self._closed = False
        self._on_ready = on_ready
        self._built: Future[Any] = Future()
        self._calls.put((self._built, lambda _: self._build(build), True))
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    # ---- the thread ----------------------------------------------------------------------------

    def _put(self, call: _Call, *, quiet: bool = False) -> Future[Any]:
        """Queue `call(searcher)`; its future holds the result or the exception. A `quiet` call's failure
        (a tell, an observe) is logged, since nobody waits for it."""
        future: Future[Any] = Future()
        self._calls.put((future, call, quiet))
        return future

    def _build(self, build: Callable[[], Searcher]) -> None:
        self._searcher = build()

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, call, quiet = item
            if not future.set_running_or_notify_cancel():
                continue
            failed = self._built.exception() if future is not self._built else None
            if failed is not None:  # the build failed: nothing else can run
                future.set_exception(failed)
                continue
            try:
                result = call(self._searcher)  # type: ignore[arg-type]  # built by the first call
            except Exception as exc:
                if quiet:
                    log.exception("%s: a call to the searcher failed", threading.current_thread().name)
                future.set_exception(exc)
            else:
                future.set_result(result)

    # ---- the Searcher protocol -----------------------------------------------------------------

    def ask(self, number: int) -> Suggestion:
        """Trial `number`'s configuration, waited for (the protocol's ask)."""
        return self._put(lambda s: s.ask(number)).result()

    def tell(self, number: int, loss: float | None, ok: bool = True) -> None:
        """Queued: the searcher learns it after the calls made before."""
        if not self._closed:
            self._put(lambda s: s.tell(number, loss, ok), quiet=True)

    def observe(self, number: int, step: int, loss: float) -> None:
        """Queued, as `tell`."""
        if not self._closed:
            self._put(lambda s: s.observe(number, step, loss), quiet=True)

    def observe_point(self, number: int, step: int, losses: tuple[float, ...], violation: float) -> None:
        """Queued, as `tell`."""
        if not self._closed:
            self._put(lambda s: s.observe_point(number, step, losses, violation), quiet=True)

    # ---- asking without waiting ----------------------------------------------------------------

    def request(self, number: int) -> None:
        """Start asking for trial `number` (numbers are requested in order, each once)."""
        if self._closed:
            return
        future: Future[Suggestion] = self._put(lambda s: s.ask(number))
        if self._on_ready is not None:
            on_ready = self._on_ready
            future.add_done_callback(lambda _: on_ready())
        self._pending.append((number, future))
        self._next = number + 1

    def next_number(self, created: int) -> int:
        """The number the next request takes: after the last one outstanding, else `created` (the
        search's trials so far)."""
        return self._next if self._pending else created

    def outstanding(self) -> int:
        """Requests whose suggestions have not been handed back by `ready` yet (finished or not)."""
        return len(self._pending)

    def ready(self, limit: int) -> list[tuple[int, Suggestion]]:
        """Up to `limit` finished suggestions, in number order (it stops at the first one still coming,
        and at a failed one, which `failure` reports)."""
        out: list[tuple[int, Suggestion]] = []
        while self._pending and len(out) < limit:
            number, future = self._pending[0]
            if not future.done() or future.cancelled() or future.exception() is not None:
                break
            self._pending.popleft()
            out.append((number, future.result()))
        return out

    def wait(self, timeout: float) -> None:
        """Wait at most `timeout` seconds for the outstanding requests (and the build before them)."""
        futures = [f for _, f in self._pending] or [self._built]
        wait_futures(futures, timeout=timeout)

    def built(self) -> bool:
        return self._built.done()

    def failure(self) -> BaseException | None:
        """Why the searcher could not be built, or the next suggestion asked, if it could not."""
        if self._built.done() and self._built.exception() is not None:
            return self._built.exception()
        if self._pending:
            future = self._pending[0][1]
            if future.done() and not future.cancelled() and future.exception() is not None:
                return future.exception()
        return None

    def call(self, fn: Callable[[Searcher], Any], timeout: float | None = None) -> Any:
        """`fn(searcher)` run on the host's thread after every call made before, waited for (for
        inspection: `host.call(lambda s: s.history())`)."""
        return self._put(fn).result(timeout)

    def close(self) -> None:
        """Drop what is queued and end the thread (later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        self._calls.put(None)
