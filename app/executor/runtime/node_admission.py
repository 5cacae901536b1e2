"""`Admission`: what a node lets in under its trainable allowlist, so that a node distrusts what reaches
it through the broker and the database.

Contract (used by `NodeAgent`; with no allowlist everything is let in, as in tests):
- `modules` filters warm-up modules: the ones outside the allowlist are logged and never imported.
- `admit(tid, epoch)` builds the launch of a trial about to start (raising when it cannot be built) and
  returns why the trial may not start (its trainable's module is outside the allowlist), or None; the
  launch of an admitted trial is kept for `launch`.
- `launch(tid, epoch)` is what the node's runtime calls to start a process: the admitted launch, or one
  built now and checked all the same (PermissionError), so that no path starts a trainable unchecked.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from quanta.allowlist import Allowlist
from quanta.executor.actions import TrialLaunch
from quanta.executor.runtime.cluster import NodeLedger

log = logging.getLogger("quanta.node")


class Admission:
    def __init__(self, node: str, ledger: NodeLedger, allowlist: Allowlist | None):
        self.node = node
        self.ledger = ledger
        self.allowlist = allowlist
        self._launches: dict[int, TrialLaunch] = {}  # built (and checked) by admit, taken by launch

    def modules(self, modules: Sequence[str]) -> list[str]:
        ok = [m for m in modules if self.allowlist is None or self.allowlist.allows(m)]
        refused = [m for m in modules if m not in ok]
        if refused:
            log.warning("not warming %s: outside the trainable allowlist (%s)", refused, self.allowlist)
        return ok

    def admit(self, tid: int, epoch: int) -> str | None:
        """Check the trainable against the allowlist before anything imports it."""
        launch = self.ledger.launch(tid, epoch)
        if not self._allows(launch):
            return (
                f"trainable '{launch.trainable}' is not allowed on node {self.node}: its module must start "
                f"with one of {self.allowlist} (the worker's QUANTA_TRAINABLE_ALLOWLIST)"
            )
        self._launches[tid] = launch
        return None

    def launch(self, tid: int, epoch: int) -> TrialLaunch:
        launch = self._launches.pop(tid, None)
        if launch is not None:
            return launch
        launch = self.ledger.launch(tid, epoch)
        if not self._allows(launch):
            raise PermissionError(f"trainable '{launch.trainable}' is not allowed on node {self.node}")
        return launch

    def _allows(self, launch: TrialLaunch) -> bool:
        return self.allowlist is None or self.allowlist.allows(launch.trainable.partition(":")[0])
