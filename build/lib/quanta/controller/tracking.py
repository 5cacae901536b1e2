"""`ReportTracking`: the controller's side of the spec's `tracking` block. The recorder hands it each
report once it is stored (`stored`), and the controller the events it handled (`handled`: a trial that
ended ends its runs); it passes those of searches that ask for tracking to a `TrackingHub`
(app/integrations/tracking), which writes them on its own thread. Searches without a tracking block
cost one dictionary lookup per report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from quanta.controller.book import SearchBook
from quanta.controller.trials import TrialIndex
from quanta.executor.actions import Event, Exited
from quanta.integrations.tracking import TrackingHub, TrialInfo

# A stored report as the recorder hands it over: (search id, trial id, step, at, metrics).
StoredReport = tuple[int, int, int, float, dict[str, Any]]


class ReportTracking:
    def __init__(self, book: SearchBook, index: TrialIndex, hub: TrackingHub | None = None):
        self._book = book
        self._index = index
        self._hub = hub
        self._tracked: set[int] = set()  # trials with a report passed on

    @property
    def hub(self) -> TrackingHub:
        if self._hub is None:
            self._hub = TrackingHub()
        return self._hub

    def stored(self, reports: Iterable[StoredReport]) -> None:
        for search_id, trial_id, step, at, metrics in reports:
            s = self._book.search(search_id)
            t = self._index.get(trial_id)
            if s is None or t is None or not s.spec.tracking.enabled():
                continue
            info = TrialInfo(search_id, s.spec.name, trial_id, t.number, t.params)
            self.hub.report(info, s.spec.tracking, step, at, metrics)
            self._tracked.add(trial_id)

    def handled(self, events: Sequence[Event]) -> None:
        if not self._tracked:
            return
        for e in events:
            if isinstance(e, Exited) and e.trial_id in self._tracked:
                t = self._index.get(e.trial_id)
                if t is not None and t.status.final:
                    self._tracked.discard(e.trial_id)
                    self.hub.ended(e.trial_id, str(t.status))

    def close(self) -> None:
        if self._hub is not None:
            self._hub.close()
