"""`TrackingHub`: the trackers of every search that asks for them, fed by the controller and run on a
thread of their own, so that writing a run never holds up a controller's round.

Contract: `report(trial, tracking, step, at, metrics)` queues one stored report of `trial` for the
trackers its search's `tracking` block names; the first report of a trial starts its run in each (a
tracker is built at its search's first report). `ended(trial_id, status)` ends the trial's runs.
`close()` writes what is queued, closes every tracker and stops the thread (bounded by a timeout). A
tracker that cannot be built (its library missing) or raises is logged once, closed, and left out for its
search from then on. Calls return at once; the thread is started by the first report.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from quanta.integrations.tracking.base import Tracker, TrialInfo, numeric

if TYPE_CHECKING:
    from quanta.spec import TrackingSpec

log = logging.getLogger("quanta.tracking")

_STOP = ("stop",)


def make_tracker(name: str, block: Any, trial: TrialInfo, base: Path) -> Tracker:
    """The tracker `name` of a spec's tracking block, for `trial`'s search, writing under `base`."""
    if name == "tensorboard":
        from quanta.integrations.tracking.tensorboard_tracker import TensorBoardTracker

        return TensorBoardTracker(base / block.dir)
    if name == "mlflow":
        from quanta.integrations.tracking.mlflow_tracker import MlflowTracker

        database = base / block.tracking_uri.removeprefix("sqlite:///")
        return MlflowTracker(database, block.experiment or trial.search_name)
    if name == "wandb":
        from quanta.integrations.tracking.wandb_tracker import WandbTracker

        return WandbTracker(base / block.dir, block.project)
    raise ValueError(f"unknown tracker {name!r}")


class TrackingHub:
    """`base`: the folder the spec's relative paths are resolved against (the controller's working
    directory when None)."""

    def __init__(self, base: Path | None = None):
        self.base = (base or Path.cwd()).resolve()
        self._queue: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Owned by the hub's thread:
        self._trackers: dict[tuple[int, str], Tracker | None] = {}
        self._open: dict[int, set[tuple[int, str]]] = {}  # trial id -> the trackers its run is open in

    def report(
        self, trial: TrialInfo, tracking: TrackingSpec, step: int, at: float, metrics: Mapping[str, Any]
    ) -> None:
        values = numeric(metrics)
        if not values:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="quanta-tracking", daemon=True)
                self._thread.start()
        self._queue.put(("report", trial, tracking, step, at, values))

    def ended(self, trial_id: int, status: str) -> None:
        if self._thread is not None:
            self._queue.put(("end", trial_id, status))

    def close(self, timeout_s: float = 60.0) -> None:
        """Write what is queued, close every tracker (runs of trials still alive end as `stopped`), stop
        the thread. Waits at most `timeout_s` (then the rest is dropped with a warning)."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("tracking: %d writes still queued after %.0f s, dropped", self._queue.qsize(), timeout_s)
        self._thread = None

    # ---- the hub's thread ----------------------------------------------------------------------

    def _main(self) -> None:
        while True:
            item = self._queue.get()
            if item == _STOP:
                self._close_all()
                return
            if item[0] == "report":
                self._report(*item[1:])
            else:
                self._end(*item[1:])

    def _tracker(self, key: tuple[int, str], block: Any, trial: TrialInfo) -> Tracker | None:
        if key not in self._trackers:
            try:
                self._trackers[key] = make_tracker(key[1], block, trial, self.base)
            except Exception as exc:  # ImportError (no library) included
                self._fail(key, "cannot start", exc)
        return self._trackers[key]

    def _report(self, trial: TrialInfo, tracking: TrackingSpec, step: int, at: float, values: dict[str, float]) -> None:
        for name, block in tracking.enabled().items():
            key = (trial.search_id, name)
            tracker = self._tracker(key, block, trial)
            if tracker is None:
                continue
            try:
                opened = self._open.setdefault(trial.trial_id, set())
                if key not in opened:
                    tracker.start(trial)
                    opened.add(key)
                tracker.log(trial.trial_id, step, at, values)
            except Exception as exc:
                self._fail(key, "failed", exc)

    def _end(self, trial_id: int, status: str) -> None:
        for key in sorted(self._open.pop(trial_id, set())):
            tracker = self._trackers.get(key)
            if tracker is None:
                continue
            try:
                tracker.end(trial_id, status)
            except Exception as exc:
                self._fail(key, "failed", exc)

    def _close_all(self) -> None:
        for key, tracker in self._trackers.items():
            if tracker is None:
                continue
            try:
                tracker.close()
            except Exception as exc:
                log.warning("tracking.%s of search %s: closing failed: %s", key[1], key[0], exc)
        self._trackers.clear()
        self._open.clear()

    def _fail(self, key: tuple[int, str], what: str, exc: BaseException) -> None:
        log.warning(
            "tracking.%s of search %s %s (%s: %s): its reports are not written there from now on",
            key[1], key[0], what, type(exc).__name__, exc,
        )  # fmt: skip
        tracker = self._trackers.get(key)
        self._trackers[key] = None
        if tracker is not None:
            try:
                tracker.close()
            except Exception:
                log.debug("closing a failed tracker failed", exc_info=True)
