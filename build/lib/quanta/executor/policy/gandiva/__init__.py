"""Gandiva's introspective scheduling for hyperparameter search (Xiao et al., OSDI 2018, section 5).

One round = one quantum. From the snapshot the policy decides, purely:

1. **Early feedback.** The judge (`quanta.search.judge`, run by the controller before each round with
   this policy's knobs, `judge_knobs`) judges each trial from its first successive-halving rung
   (`rung_eta`, default 3: `max_steps / 27` steps, textbook ASHA's first rung) by the trial's rank among
   the trials recorded at its rungs together with the extrapolation of its curve, then every
   `feedback_every_steps` steps; with `rung_eta: null`, by the curve alone from
   `min_steps_before_judgement` steps (10 % by default). The policy reads its verdicts from
   `snapshot.verdicts`. A judged trial's *promise* is the verdict's (P(reach
   target), then the predicted final). A trial the verdict kills (P(reach target) below
   `kill_threshold`) is stopped (`Plan.stop`).
2. **Tiers.** Each round ranks the alive trials; the rank is the priority this round:
   - *exclusive*: the top-M judged trials by promise (default M = half the devices, at least 1). They
     keep their devices for as long as they stay top-M, alone (never packed, never rotated out). An
     incumbent gets `swap_margin` of extra promise so that noise in the predictions does not swap
     trials back and forth. Exclusivity never takes the last device other trials need to make
     progress (on one device everything is time-shared).
   - *guard* (starvation guard): trials not judged yet (fewer than min_steps steps, or no prediction
     yet) come first in the time-share rotation, oldest first, a running one kept running, until
     judged, so that each new configuration reaches its first feedback promptly.
   - *shared*: the rest share the remaining devices by stride scheduling with weight
     `1 + promise_weight * P(reach)` (0.5 for a trial that cannot be judged, e.g. no target).
   Units are taken in rank order while devices remain; a unit that does not fit is skipped (lower
   units may backfill devices it could not use). `Plan.state["rank"]` publishes the order.
   With `experimental.sticky` (a research knob, off by default: on the Philly traces it cut moves but
   lengthened mean JCT, see docs/simulation.md) trials are time-sliced on their own devices, as in Gandiva: a unit
   runs on the devices it is resident on when no higher-ranked unit claims them, and otherwise waits
   for its turn there, moving only when the move gains it device time (its device's queue is longer
   than the target's by more than one; newcomers in the guard move freely). So a trial is only ever
   parked because a higher-ranked unit takes its devices or the units above it fill the cluster.
   With `experimental.gang` as well, a multi-device trial that starts or moves claims a whole aligned block of servers
   (the least loaded; lower-ranked occupants leave together) and is time-sliced there as a gang, and a
   pack is formed only from a trial parked on its host's own device (forming it moves nobody).
   Without `sticky`, units are taken cluster-wide in rank order and a trial is parked only when those
   ranked above it hold the devices it could use: a higher-priority trial is never suspended in
   favour of a lower one (the rotation then moves trials constantly: up to 181 moves per job on the
   Philly traces, docs/simulation.md).
3. **Placement** keeps running trials where they are, resumes parked trials on their own devices when
   free, and moves the others onto free devices (a move = `Migrate`: this is how the highest-ranked
   parked trial lands on a device that just freed; with `sticky`, the least loaded ones).
   Multi-device trials take devices of one node when one node fits, and a trial spread over nodes is
   consolidated as soon as one node can hold it.
4. **Introspective packing** (`packing`, when trials wait): the lowest-utilisation waiting trial
   (lowest measured solo rate, then lightest memory) joins the lowest-utilisation running shared
   trial on its device, if their measured memory fits (device memory 0 = unknown: allowed) and the
   pair was never found bad. One pack is on trial at a time. Once the pair has run together for a
   quantum and `snapshot.pair_rates` holds a fresh sample for it, the pack is kept if
   `rate_a/solo_a + rate_b/solo_b > 1 + pack_margin`, else undone and the pair remembered as bad
   (never retried). A kept pack is one unit in the rotation until a member ends, leaves the shared
   tier, or a fresh sample shows the gain gone. `Plan.notes` explain each decision.
5. **Grow-shrink** (`grow_shrink`): a device idle for `idle_grow_s` is lent to the highest-ranked
   running elastic trial of its node (placed under more devices than it needs); capacity is always
   counted without the loans, so a loan is returned the round a waiting trial can use the device.

Stride passes are kept incrementally in state (pass += device time / weight at the time the time was
spent), unlike `TimeslicePolicy`'s `device_seconds / weight`: with that form a weight that rises late
would credit the trial with all its past time at the new weight and let it monopolise a device. Only
time spent in the shared tier advances a pass; a trial entering the tier joins at the tier's lowest
pass (its virtual time), like a newcomer in `TimeslicePolicy`.

Modules: `tiers` (exclusive/guard/shared ranking, stride passes), `packs` (the pack lifecycle, a
typed `Pack`), `placement` (which units run, on which devices), `grow` (grow-shrink), `policy` (the
round composing them).

Pure: no I/O, no clock (`snapshot.now`), no torch. Everything remembered lives in `Plan.state`
(JSON: string keys, lists): ``trials`` (tier, pass, device time, weight, promise per trial),
``exclusive``, ``rank``, ``packs``, ``bad_pairs``, ``grown``, ``idle_since``.
"""

from quanta.executor.policy.gandiva.policy import GandivaPolicy
from quanta.executor.policy.gandiva.tiers import EXCLUSIVE, GUARD, SHARED

__all__ = ["EXCLUSIVE", "GUARD", "SHARED", "GandivaPolicy"]
