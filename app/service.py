"""Service wiring: the controller loops the commands run, and the runtime factory for distributed mode.
The CLI modules (`quanta serve`, `quanta controller`) parse options and call these; they hold no wiring.

- `make_runtime(broker, store, checkpoints)`: a `CeleryRuntime` over the node agents registered in the
  database (`quanta controller`, `quanta serve --broker`).
- `ControllerLoop`: `quanta serve`'s controller thread (with a `LocalRuntime`, or a `CeleryRuntime` when
  given a broker). The controller is not thread-safe, so this one thread owns it (and the runtime): it
  ticks, turns runtime events into rows, and carries out deletions the API requested; the API threads
  only read and write database rows. On start it calls `Controller.load()`, so a server killed in the
  middle of a search continues it; on `stop()` it asks resident trials for a checkpoint and closes the
  runtime (trial processes exit), leaving searches `running` to continue at the next start.
- `run_controller(ctl, stop)`: `quanta controller`'s loop (in the calling thread).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from app.status import SEARCH_STARTED, SearchStatus

if TYPE_CHECKING:
    from app.controller import Controller
    from app.db.lease import ControllerLease
    from app.db.store import Store
    from app.devices import Device
    from app.executor.policy.knobs import ShareKnobs
    from app.executor.runtime.celery_runtime import CeleryRuntime

log = logging.getLogger("quanta.service")

LEASE_CHECK_S = 5.0  # how often a running controller checks that it still holds its database's lease


def make_runtime(
    broker: str, store: Store, checkpoints: str | Path, *, dead_after_s: float = 10.0, expect_timeout_s: float = 30.0
) -> CeleryRuntime:
    """A `CeleryRuntime` over the node agents registered in `store`'s database, sending actions through
    `broker`. The controller driving it must use `checkpoints` as its workdir (the shared store)."""
    from app.db.cluster import DbCluster
    from app.executor.runtime.celery_runtime import CeleryRuntime

    cluster = DbCluster(workdir=checkpoints, engine=store.engine)
    return CeleryRuntime(broker, cluster, dead_after_s=dead_after_s, expect_timeout_s=expect_timeout_s)


class ControllerLoop:
    """Runs `Controller.step` in a thread of its own until `stop()`; `share`: the share layer's knobs
    (None: its defaults)."""

    def __init__(
        self,
        store: Store,
        devices: list[Device],
        workdir: Path,
        *,
        tick_s: float = 0.5,
        broker: str | None = None,
        lease: ControllerLease | None = None,
        share: ShareKnobs | None = None,
    ):
        self.store = store
        self.share = share
        self.lease = lease  # held by the caller for this loop; checked while it runs, released at its end
        self.broker = broker  # distributed mode: trials run on `quanta worker` nodes, not on `devices`
        self.devices = devices
        self.workdir = Path(workdir)
        self.tick_s = tick_s
        self._stop = threading.Event()
        self._state = "starting"
        self._deletable: dict[int, float] = {}
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

    # ---- the thread --------------------------------------------------------------------------

    def _main(self) -> None:
        from app.controller import Controller, ControllerOptions
        from app.executor.runtime.base import Runtime
        from app.executor.runtime.local import LocalRuntime

        ctl: Controller | None = None
        runtime: Runtime | None = None
        try:
            # Distributed: workdir is the shared checkpoint store. Local: the controller binds itself as
            # the runtime's launcher.
            runtime = make_runtime(self.broker, self.store, self.workdir) if self.broker else LocalRuntime(self.devices)
            ctl = Controller(self.store, runtime, ControllerOptions(workdir=self.workdir, share=self.share))
            ctl.load()
            self._publish_devices(ctl)
            self._state = "running"
            log.info("controller running: %d active searches", len(ctl.searches()))
            checked = time.monotonic()
            while not self._stop.is_set():
                if self.lease is not None and time.monotonic() - checked > LEASE_CHECK_S:
                    checked = time.monotonic()
                    self._keep_lease()
                try:
                    self._deletions(ctl)
                    ctl.step(max_wait=self.tick_s)
                except Exception:  # keep serving: the next tick starts again from the database
                    log.exception("controller tick failed")
                    self._stop.wait(1.0)
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

    def _keep_lease(self) -> None:
        """Raise (ending the loop, /healthz failing) when another controller took the database over while
        our lease's connection was down; a database merely away is retried at the next check."""
        from app.db.lease import LeaseHeld

        assert self.lease is not None
        try:
            self.lease.ensure()
        except LeaseHeld:
            raise
        except Exception as exc:
            log.warning("cannot check the controller lease: %s", exc)

    def _publish_devices(self, ctl: Controller) -> None:
        """The devices with nothing on them yet (the controller publishes placements once it ticks)."""
        from app.db.models import ClusterView

        self.store.publish_cluster_view(ClusterView.idle(time.time(), ctl.runtime.devices()))

    def _deletions(self, ctl: Controller) -> None:
        """Carry out DELETE requests: stop the search, wait until its trial processes have exited
        (and their last events are recorded), then delete its rows and its checkpoints."""
        for sid in self.store.pending_deletes():
            s = ctl.search(sid)
            if s is not None and s.status in SEARCH_STARTED:
                ctl.stop_search(sid, SearchStatus.STOPPED, "deleted by user")
            resident = ctl.runtime.residency()
            if any(t.id in resident for t in ctl.trials_of(sid)):
                self._deletable.pop(sid, None)
                continue
            first = self._deletable.setdefault(sid, time.monotonic())
            if time.monotonic() - first < 0.3:  # let the last exit events arrive
                continue
            ctl.handle(ctl.runtime.poll(0))
            ctl.flush()
            self.store.delete_search(sid)
            ctl.forget_search(sid)
            shutil.rmtree(self.workdir / f"search-{sid}", ignore_errors=True)
            self._deletable.pop(sid, None)
            log.info("search %s deleted", sid)

    def _shutdown(self, ctl: Controller, wait_s: float = 10.0) -> None:
        """Checkpoint resident trials (bounded), then close the runtime: trial processes exit."""
        from app.executor.actions import Checkpointed

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


def _publish_idle(ctl: Controller) -> None:
    """When nothing runs, the controller does not publish placements: show the registered devices."""
    from app.db.models import ClusterView

    published = ctl.store.cluster_view()
    idle = ClusterView.idle(time.time(), ctl.runtime.devices(), ctl.round_no)
    if published is None or [d.id for d in published.devices] != [d.id for d in idle.devices] or not ctl.has_alive():
        ctl.store.publish_cluster_view(idle)


def run_controller(
    ctl: Controller, stop: threading.Event, tick_s: float = 0.5, lease: ControllerLease | None = None
) -> None:
    """Tick until `stop` is set; a failing tick (database or broker away) is logged and retried. With a
    `lease`, check every `LEASE_CHECK_S` that it is still held (taking it again after a dropped
    connection); `LeaseHeld` ends the loop when another controller took the database over."""
    from app.db.lease import LeaseHeld

    last_publish = 0.0
    checked = time.monotonic()
    while not stop.is_set():
        if lease is not None and time.monotonic() - checked > LEASE_CHECK_S:
            checked = time.monotonic()
            try:
                lease.ensure()
            except LeaseHeld:
                raise
            except Exception as exc:
                log.warning("cannot check the controller lease: %s", exc)
        try:
            began = time.monotonic()
            ctl.step(max_wait=tick_s)
            if time.monotonic() - last_publish > 2.0:
                last_publish = time.monotonic()
                if not ctl.has_alive():
                    _publish_idle(ctl)
            if not ctl.has_alive():
                # Nothing to wait for inside `step` (no trial alive, no search governing): without this
                # wait an idle service ticked back to back, querying the database without pause (half a
                # core per idle controller). New searches are still picked up within `tick_s`.
                stop.wait(max(0.0, tick_s - (time.monotonic() - began)))
        except Exception:
            log.exception("controller tick failed; retrying")
            stop.wait(1.0)
