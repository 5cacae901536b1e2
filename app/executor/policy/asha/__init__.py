"""Asynchronous successive halving (ASHA, Li et al. 2020) and Hyperband as brackets of it, with
Quanta's twist: a trial below its rung is *parked*, not killed.

Rungs are `quanta.search.fidelity.rungs(max_steps, first, eta)` steps; in Hyperband bracket `b` (of
`brackets`) the first rung is `min_steps * eta**b` (`min_steps` defaults to
`fidelity.default_first_rung`, max_steps / eta**4), and trial `i` goes to bracket `i % brackets`
(trial ids; ASHA is Hyperband with one bracket). A trial's value at a rung is the best loss it reported
until its first report past the rung (`fidelity.value_at`, oriented by the search's goal), recorded
once. Trials of different searches, or of different brackets, are never compared.

Two variants (`mode`):

- `pause` (ASHA's promotion type, what no peer does cheaply): a trial that reaches the rung it was
  allowed to run to is *held*: parked in host memory (its process keeps its state) and left out of its
  search's parallelism, so new configurations keep coming. Whenever a device is free the policy
  promotes, as Li et al.'s `get_job`: the best held trial of the highest rung whose top
  `floor(n / eta)` (n = trials recorded at that rung, finished ones included) holds it; else it starts
  a queued trial (arrival order); else, once its search will create no more trials
  (`SearchView.more_trials`), rather than leave a device idle, it promotes a held trial anyway: the
  best of the lowest rung (`tail_order: lowest`, the default), so that every held trial climbs one rung
  before any runs to its end and the next rung's ranks promote the late bloomers, or of the highest
  (`tail_order: highest`). A promoted trial resumes where it stopped: no lost work, no
  restart. Held trials count against `memory_budget_mb` of host memory (their measured RSS); past it
  the lowest-ranked (lowest rung, then worst value) are released: checkpointed and freed, to come back
  from the checkpoint if promoted later.
  With `rule: rent` (the default) promotion is by rank too, but the best held trial of a rung with
  fewer than `eta` recorded waits only as long as its next rung would cost the cluster (its device time
  to that rung / the devices), then goes on (`rules.rent_paid`); when it was held is kept in the state. Under
  `rule: promotion` (Li et al.'s alone) the first trial to climb to a rung waits there for `eta - 1` more.
- `kill` (the classic stopping type, as Ray Tune's ASHAScheduler): a trial reaching a rung continues
  if its loss is at or below the `100 / eta` percentile of the losses recorded at that rung so far
  (itself included), else it is stopped for good.

With `rung_check` (on by default: 0.5 on the reports after 10 pairs, see `AshaKnobs`) a rung judges
only while it ranks trials as the next rung does: once `rung_check_pairs` trials are recorded at both, a
rung whose Spearman correlation with the next one is below `rung_check` is passed over for the rest of
the search (lowest rungs first; its held trials go on as devices free; the plan notes it). The pairs are
the trials the search promoted past the rung, which is what it can measure itself: on LCBench the
per-epoch values of such trials correlate 0.21 at epoch 1 and 0.66-0.83 from epoch 2 on (median of 24
tasks). The correlation is taken on each trial's loss at its first report past each rung (kept in the
state as `reports`), not on the best-so-far records, which contain one another and agree by
construction. The decision is kept in the state (`passed`).

Running trials are never preempted (a worker runs its job to its next rung); `Plan.limits` asks each
placed trial to park itself at its first report past its next rung, so it stops there rather than a
quantum later. A rung is judged at the first report past it (`fidelity.value_at`); a trial that has not
reported past its rung goes on until it does. Trials without a search (trace
jobs) run first-come first-served.

Modules: `policy` (`AshaPolicy`: the round, its memos across rounds), `rules` (the round's rules, one
function each: the decision at a rung, promotion, rent, the idle device), `held` (the held trials kept
sorted across rounds), `rung_check` (which rungs are passed over).

Pure: no I/O, no clock. State (JSON): per trial the rung it may run to, per (search, bracket, rung)
the values recorded, with `rule: rent` per held trial its rung and since when it waits there, and with
`rung_check` per (search, bracket) how many of the lowest rungs are passed over and whether that is
decided.
"""

from quanta.executor.policy.asha.policy import AshaPolicy

__all__ = ["AshaPolicy"]
