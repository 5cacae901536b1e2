"""Service wiring: the one loop that drives a controller, `quanta serve`'s controller thread, and the
runtime factory for distributed mode. The commands (app/cli/) parse options and call these; they hold
no wiring. A search driven in the caller's process (`run_search`, `resume_search`, `delete_stored_search`)
is `quanta.stored_search`'s, over the loop here.

- `ControllerLoop(ctl, store, workdir)`: steps a built controller in the calling thread until told to
  stop. `quanta run` (until its search ends), `quanta controller` (until SIGINT/SIGTERM) and
  `quanta serve` (in `ControllerThread`) all run it, so what a running controller does beside its tick
  is in one place: the lease check, the deletions the API asked for, the devices shown while nothing
  runs, and the rest while idle.
- `ControllerThread`: `quanta serve`'s controller (with a `LocalRuntime`, or a `CeleryRuntime` when given a
  broker). The controller is not thread-safe, so this one thread owns it (and the runtime); the API
  threads only read and write database rows. On start it calls `Controller.load()`, so a server killed
  in the middle of a search continues it; on `stop()` it asks resident trials for a checkpoint and
  closes the runtime (trial processes exit), leaving searches `running` to continue at the next start.
- `make_runtime(broker, store, checkpoints)`: a `CeleryRuntime` over the node agents registered in the
  database (`quanta controller`, `quanta serve --broker`).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from quanta.status import SEARCH_STARTED, SearchStatus

if TYPE_CHECKING:
    from quanta.controller import Controller
    from quanta.db.lease import ControllerLease
    from quanta.db.protocol import ServiceStore
    from quanta.db.store import Store
    from quanta.devices import Device
    from quanta.executor.policy.knobs import ShareKnobs
    from quanta.executor.runtime.celery_runtime import CeleryRuntime

log = logging.getLogger("quanta.service")

STOP_CHECK_S = 0.05  # how often an idle loop's rest looks at `stop`
TICK_S = 0.5  # the longest a running controller goes without a tick: new searches and commands wait no longer
LEASE_CHECK_S = 5.0  # how often a running controller checks that it still holds its database's lease
SHOW_IDLE_S = 2.0  # how often an idle controller checks that the published view shows its devices empty
RETRY_S = 1.0  # the pause after a failed round (database or broker away) before the next
DELETE_GRACE_S = 0.3  # after a deleted search's last process has gone, for its last exit events to arrive


def make_runtime(
    broker: str, store: Store, checkpoints: str | Path, *, dead_after_s: float = 10.0, expect_timeout_s: float = 30.0
) -> CeleryRuntime:
    """A `CeleryRuntime` over the node agents registered in `store`'s database, sending actions through
    `broker`. The controller driving it must use `checkpoints` as its workdir (the shared store)."""
    from quanta.db.cluster import DbCluster
    from quanta.executor.runtime.celery_runtime import CeleryRuntime

    cluster = DbCluster(workdir=checkpoints, engine=store.engine)
    return CeleryRuntime(broker, cluster, dead_after_s=dead_after_s, expect_timeout_s=expect_timeout_s)


class ControllerLoop:
    """Steps `ctl` (whose store is `store`, whose checkpoints and logs are under `workdir`) in the calling
    thread. `lease`: held by the caller, checked every `LEASE_CHECK_S` while the loop runs (the caller
    releases it). `stop`: set it (from a signal handler or another thread) to end the loop within a
    tick. `retry_failed_ticks`: a failing round is logged and retried after `RETRY_S` (a service outlives
    its database or broker going away); False: the error ends the loop (`quanta run`)."""

    def __init__(
        self,
        ctl: Controller,
        store: ServiceStore,
        workdir: Path,
        *,
        tick_s: float = TICK_S,
        lease: ControllerLease | None = None,
        stop: threading.Event | None = None,
        retry_failed_ticks: bool = True,
    ):
        self.ctl = ctl
        self.store = store
        self.workdir = Path(workdir)
        self.tick_s = tick_s
        self.lease = lease
        self.stop = stop if stop is not None else threading.Event()
        self.retry_failed_ticks = retry_failed_ticks
        self._deletable: dict[int, float] = {}
        self._deletes_read_at = -float("inf")
        self._idle_shown_at = -float("inf")
        # Set when this process's store creates a search (the API of `quanta serve`): an idle loop's rest
        # ends then, so a posted search starts at once rather than at the next tick (up to `tick_s`).
        self._wake = threading.Event()
        subscribe = getattr(store, "on_search_created", None)
        if callable(subscribe):
            subscribe(self._wake.set)

    def run(self, until: Callable[[], bool] | None = None, on_step: Callable[[], None] | None = None) -> None:
        """Round after round until `stop` is set or `until()` is true (checked before each round):
        check the lease when due (`LeaseHeld`, another controller took the database over, ends the loop),
        carry out requested deletions, `ctl.step(max_wait=tick_s)`, show the devices empty while no
        trial is alive, then `on_step()`.

        `step` waits for events while a trial is alive or a search runs, and returns early when one
        wakes it (a trial ended or parked at its step limit, freeing a device), so a busy controller is
        never held up here. Idle (`ctl.idle()`: no trial alive, no search running) `step` returns at
        once, and the loop rests for the rest of the tick instead of ticking back to back: a new search
        is picked up at the next tick, within `tick_s`, or at once when this process's store created
        it (`Store.on_search_created`: a search posted to `quanta serve`)."""
        checked = time.monotonic()
        while not self.stop.is_set() and not (until is not None and until()):
            if self.lease is not None and time.monotonic() - checked > LEASE_CHECK_S:
                checked = time.monotonic()
                self._keep_lease()
            began = time.monotonic()
            try:
                self._deletions()
                self.ctl.step(max_wait=self.tick_s)
                self.show_idle()
            except Exception:
                if not self.retry_failed_ticks:
                    raise
                log.exception("controller tick failed; retrying")
                self.stop.wait(RETRY_S)
                continue
            if on_step is not None:
                on_step()
            if self.ctl.idle():
                self._rest(max(0.0, self.tick_s - (time.monotonic() - began)))

    def _rest(self, seconds: float) -> None:
        """Rest while idle: `seconds`, or until `stop` is set or a search is created in this process,
        whichever comes first (`stop` is looked at every `STOP_CHECK_S`)."""
        end = time.monotonic() + seconds
        while not self.stop.is_set():
            left = end - time.monotonic()
            if left <= 0 or self._wake.wait(min(left, STOP_CHECK_S)):
                break
        self._wake.clear()

    def show_idle(self) -> None:
        """While no trial is alive the controller plans nothing and so publishes nothing: every
        `SHOW_IDLE_S`, publish the runtime's devices with nothing on them, unless that is what readers
        already see (an idle service does not write to its database)."""
        from quanta.db.models import ClusterView

        if self.ctl.has_alive() or time.monotonic() - self._idle_shown_at < SHOW_IDLE_S:
            return
        self._idle_shown_at = time.monotonic()
        idle = ClusterView.idle(time.time(), self.ctl.runtime.devices(), self.ctl.round_no)
        shown = self.store.cluster_view()
        if shown is None or (shown.devices, shown.pairs, shown.notes) != (idle.devices, idle.pairs, idle.notes):
            self.store.publish_cluster_view(idle)

    def _keep_lease(self) -> None:
        """Raise `LeaseHeld` when another controller took the database over while our lease's connection
        was down (it is taken again when free); a database merely away is retried at the next check."""
        from quanta.db.lease import LeaseHeld

        assert self.lease is not None
        try:
            self.lease.ensure()
        except LeaseHeld:
            raise
        except Exception as exc:
            log.warning("cannot check the controller lease: %s", exc)

    def _deletions(self) -> None:
        """Carry out DELETE requests: stop the search, wait until its trial processes have exited
        (and their last events are recorded), then delete its rows and its checkpoints."""
        ctl = self.ctl
        if not ctl.idle() and time.monotonic() - self._deletes_read_at < ctl.options.read_store_every_s:
            return  # read as often as the controller reads the other requests (`read_store_every_s`)
        self._deletes_read_at = time.monotonic()
        for sid in self.store.pending_deletes():
            s = ctl.search(sid)
            if s is not None and s.status in SEARCH_STARTED:
                ctl.stop_search(sid, SearchStatus.STOPPED, "deleted by user")
            resident = ctl.runtime.residency()
            if any(t.id in resident for t in ctl.trials_of(sid)):
                self._deletable.pop(sid, None)
                continue
            first = self._deletable.setdefault(sid, time.monotonic())
            if time.monotonic() - first < DELETE_GRACE_S:
                continue
            ctl.handle(ctl.runtime.poll(0))
            ctl.flush()
            # Files first, rows last: once the search reads as gone (its row deleted), so are its
            # checkpoints and logs. A restart in between finds the request still pending and finishes it.
            shutil.rmtree(self.workdir / f"search-{sid}", ignore_errors=True)
            self.store.delete_search(sid)
            ctl.forget_search(sid)
            self._deletable.pop(sid, None)
            log.info("search %s deleted", sid)


class ControllerThread:
    """`quanta serve`'s controller: `ControllerLoop` in a thread of its own until `stop()`. `devices`: this
    machine's (a `LocalRuntime`); with `broker`, trials run on `quanta worker` nodes instead and
    `workdir` is their shared checkpoint store. `lease`: held by the caller for this thread, released at
    its end. `share`: the share layer's knobs (None: its defaults)."""

    def __init__(
        self,
        store: Store,
        devices: list[Device],
        workdir: Path,
        *,
        tick_s: float = TICK_S,
        broker: str | None = None,
        lease: ControllerLease | None = None,
        share: ShareKnobs | None = None,
    ):
        self.store = store
        self.share = share
        self.lease = lease
        self.broker = broker
        self.devices = devices
        self.workdir = Path(workdir)
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._state = "starting"
        self._thread = threading.Thread(target=self._main, name="quanta-controller", daemon=True)

    def state(self) -> str:
        """`starting`, `running`, `stopped` or `failed`; `failed` too when the thread is gone while it
        should run (whatever ended it), so that /healthz never reports a dead loop as healthy."""
        if self._state in ("starting", "running") and self._thread.ident is not None and not self._thread.is_alive():
            return "failed"
        return self._state

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _main(self) -> None:
        from quanta.controller import Controller, ControllerOptions
        from quanta.controller.options import READ_STORE_EVERY_S, READER_PUBLISH_EVERY_S, SERVICE_SEARCHER_WAIT_S
        from quanta.executor.runtime.base import Runtime
        from quanta.executor.runtime.local import LocalRuntime

        ctl: Controller | None = None
        runtime: Runtime | None = None
        try:
            # The controller binds itself as the runtime's launcher.
            runtime = make_runtime(self.broker, self.store, self.workdir) if self.broker else LocalRuntime(self.devices)
            options = ControllerOptions(
                workdir=self.workdir,
                share=self.share,
                searcher_wait_s=SERVICE_SEARCHER_WAIT_S,
                publish_every_s=READER_PUBLISH_EVERY_S,
                read_store_every_s=READ_STORE_EVERY_S,
            )
            ctl = Controller(self.store, runtime, options)
            ctl.load()
            loop = ControllerLoop(ctl, self.store, self.workdir, tick_s=self.tick_s, lease=self.lease, stop=self._stop)
            loop.show_idle()  # the devices are on the dashboard before the service reports itself running
            self._state = "running"
            log.info("controller running: %d active searches", len(ctl.searches()))
            loop.run()
        except Exception:
            log.exception("controller failed")
            self._state = "failed"
        finally:
            if ctl is not None:
                self._shutdown(ctl)
            elif runtime is not None:
                runtime.close()
            if self.lease is not None:
                self.lease.release()
            if self._state != "failed":
                self._state = "stopped"

    def _shutdown(self, ctl: Controller, wait_s: float = 10.0) -> None:
        """Checkpoint resident trials (bounded), then close the runtime: trial processes exit."""
        from quanta.executor.actions import Checkpointed

        try:
            waiting = set(ctl.runtime.residency())
            for tid in waiting:
                # The service's runtimes (local, Celery) checkpoint; the Runtime protocol (also the
                # simulator's) does not promise it.
                ctl.runtime.checkpoint(tid)  # type: ignore[attr-defined]
            deadline = time.monotonic() + wait_s
            while waiting and time.monotonic() < deadline:
                events = ctl.runtime.poll(0.2)
                waiting -= {e.trial_id for e in events if isinstance(e, Checkpointed)}
                waiting &= set(ctl.runtime.residency())
                ctl.handle(events)
            ctl.flush()
        except Exception:
            log.exception("checkpointing before shutdown failed")
        finally:
            ctl.close()
