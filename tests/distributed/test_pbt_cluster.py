"""Population-based training on many "machines": two worker nodes of 2 CPU devices each, a controller
(`quanta controller --broker`), PostgreSQL and Redis. A member's exploit goes through the checkpoint
store: the source's node writes its state beside the target's checkpoint (`Fork` with the staging
suffix, found under the node's own mount), the target's node releases it, and the target resumes on
whichever node the plan gives it from the state renamed into place. Its reports go on from the
source's step with the explored learning rate."""

from __future__ import annotations

import pytest
from sqlmodel import select

from quanta.db.models import IntentRow
from tests.distributed.conftest import Cluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

STEPS, INTERVAL = 60, 15


def pbt_spec() -> dict:
    return {
        "name": "pbt-cluster",
        "trainable": "tests.trainables:mutable_sgd",
        "space": {"lr": {"loguniform": [0.001, 1.0], "mutable": True}},
        "metric": {"name": "loss", "goal": "minimize", "target": -1.0},  # never reached: trials run their budget
        "budget": {"max_trials": 4, "max_steps": STEPS, "max_seconds": 240},
        "search": {"algorithm": "random"},
        "seed": 3,
        "scheduler": {
            "policy": "pbt",
            "population": 4,
            "interval_steps": INTERVAL,
            "quantile": 0.5,
            "resample_p": 0.0,
            "quantum_s": 1.0,
        },
        "config": {"sleep_s": 0.02},
    }


def test_pbt_exploits_go_through_the_checkpoint_store_across_nodes(cluster: Cluster) -> None:
    sid = cluster.submit(pbt_spec())
    row = cluster.wait_search(sid, 200)
    assert row.status == "completed", row.error
    store = cluster.store
    trials = store.trials(sid)
    assert len(trials) == 4 and all(t.status == "completed" and t.steps == STEPS for t in trials), [
        (t.id, t.status, t.steps, t.error) for t in trials
    ]
    exploits = [c for t in trials for c in store.config_changes(t.id) if c.cause == "exploit"]
    assert exploits, f"no exploit happened:\n{cluster.logs_text()}"
    assert not store.fork_requests(("exploit-staging", "exploit-staged")), "an exploit was left in flight"
    went_on = 0
    for change in exploits:
        target, k, new_lr = change.trial_id, change.step, change.values["lr"]
        later = min((c.at for c in store.config_changes(target) if c.at > change.at), default=float("inf"))
        mine = [r for r in store.reports(target) if change.at < r.at < later]
        if not mine:
            continue
        went_on += 1
        # Each process of it after the exploit runs on from the source's step, under the new rate. (A
        # trial that ends on one node while the plan moves it to another is run again there from its last
        # checkpoint, a second process: that is the cross-node hand-off's, whatever the checkpoint holds.)
        by_attempt: dict[int, list[int]] = {}
        for r in sorted(mine, key=lambda r: r.at):
            by_attempt.setdefault(r.attempt, []).append(r.step)
            assert r.metrics["lr"] == pytest.approx(new_lr) and r.metrics["config_lr"] == pytest.approx(new_lr)
        first = by_attempt[min(by_attempt)]
        assert first == list(range(k, k + len(first))), (target, k, by_attempt)
        assert all(
            steps == list(range(steps[0], steps[0] + len(steps))) and steps[0] >= k for steps in by_attempt.values()
        )
    assert went_on
    # Where each trial ran: the population used both nodes, so states crossed between them.
    ids = {t.id for t in trials}
    with store.session() as s:
        actions = [a for i in s.exec(select(IntentRow)) for a in i.actions if a["trial_id"] in ids]
    placed = {d.split("/")[0] for a in actions for d in a.get("devices", ())}
    assert placed == {"n1", "n2"}
    lineage = store.lineage(sid)
    assert sum(1 for t in lineage.trials for c in t.changes if c.cause == "exploit") == len(exploits)
