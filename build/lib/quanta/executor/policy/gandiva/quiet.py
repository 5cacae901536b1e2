"""When gandiva's next rounds cannot change anything: the round's `Plan.quiet_until`.

A round is *quiet* when its plan changes nothing and nothing it reads can move before an event wakes
the controller (a trial arrives or ends, a command comes). Then every later round would plan the same
placement until that event, and a controller that trusts the hint (`ControllerOptions.trust_quiet`,
the simulator's) need not plan them. Gandiva's rounds read time and progress in four places; a round
is quiet only when none of them can act:

- the judge: it judges trials of running searches from their curves, which grow with every report, so
  no search may be running (trace jobs report nothing and are never judged);
- the rotation: it decides only when trials wait, so every candidate must run, on the devices it is
  resident on (the plan moves nobody), and the plan stops nobody;
- the starvation guard: a trial leaves it at a step count and then joins the shared tier at that
  round's lowest stride pass, so no candidate may still be in it (a trace job's guard is its first
  100 mini-batches);
- packs and grow-shrink: a pack on trial is measured after a quantum and a kept one re-checked on each
  fresh sample, and a device idle for `idle_grow_s` is lent; so no pack may stand, and no device may be
  free while grow-shrink is on.

Stride passes still advance while nobody waits, but incrementally (device time over weight), so the
round the event brings adds the same time at once. Checked on Philly traces: the same summaries with
and without the hint (tests/unit/test_sim_driver.py; docs/simulation.md has the speed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from quanta.executor.policy.gandiva.packs import Pack
from quanta.executor.policy.gandiva.tiers import Standing
from quanta.executor.policy.knobs import GandivaKnobs
from quanta.executor.policy.placement.board import Board, moves_nobody
from quanta.executor.policy.types import ClusterSnapshot, TrialView


def quiet_until(
    knobs: GandivaKnobs,
    snapshot: ClusterSnapshot,
    cands: Sequence[TrialView],
    standing: Mapping[int, Standing],
    stop: Sequence[int],
    packs: Sequence[Pack],
    board: Board,
    placement: Mapping[str, tuple[int, ...]],
) -> float | None:
    """`math.inf` when the round is quiet (see the module docstring): no later round changes anything
    before an event; None otherwise. `placement` is the round's plan, `board` the board it came from
    (loans included)."""
    if snapshot.searches or stop or packs or (knobs.grow_shrink and board.n_free):
        return None
    if any(v.judged for v in snapshot.verdicts.values()):
        return None
    if not moves_nobody(cands, placement) or any(standing[t.id].newcomer for t in cands):
        return None
    return math.inf
