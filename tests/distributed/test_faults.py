"""Faults on a real cluster on this machine (worker processes stand for nodes; real Redis and PostgreSQL):
a node killed, the controller killed, the broker restarted empty, a task delivered twice. Each search
audits itself (`tests.distributed.trainables:guarded`): no trial may run twice at once, and every
report a trial made must be stored exactly once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from celery import Celery
from sqlmodel import select

from quanta.db.cluster import AppliedRow, DbCluster, NodeRow
from quanta.db.models import IntentRow, SearchRow
from quanta.executor.runtime.celery_conf import APPLY_TASK, celery_conf, queue_of
from quanta.spec import parse_spec
from tests.distributed.conftest import Cluster, fault_spec, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _completed_every_trial(cluster: Cluster, sid: int, spec: dict) -> list:
    trials = cluster.trials(sid)
    n, steps = spec["budget"]["max_trials"], spec["budget"]["max_steps"]
    assert sorted(t.number for t in trials) == list(range(n)), "a trial is missing or was created twice"
    bad = [(t.id, t.status, t.steps, t.error) for t in trials if t.status != "completed" or t.steps != steps]
    assert not bad, f"trials not run to their end: {bad}"
    return trials


def _reports_exactly_once(cluster: Cluster, sid: int, audit: Path) -> None:
    made = Counter(r["nonce"] for recs in cluster.audit_records(audit).values() for r in recs if r["event"] == "report")
    stored = Counter(r.metrics["nonce"] for r in cluster.store.search_reports(sid))
    assert made, "the trials reported nothing"
    assert not [k for k, v in stored.items() if v > 1], "a report was stored twice"
    lost, unknown = set(made) - set(stored), set(stored) - set(made)
    assert not lost and not unknown, f"{len(lost)} reports lost, {len(unknown)} unknown"


def _reporting(cluster: Cluster, sid: int, at_least: int) -> bool:
    return len(cluster.store.search_reports(sid)) >= at_least


def test_killed_worker_trials_restart_on_another_node(cluster: Cluster) -> None:
    audit = cluster.tmp / "audit-kill-worker"
    spec = fault_spec(audit, name="kill-worker")
    sid = cluster.submit(spec)

    def n2_holds_checkpointed_trials() -> dict | None:
        here = cluster.node_trials("n2")
        ck = {t.id for t in cluster.trials(sid) if (t.checkpoint_step or 0) > 0}
        return here if here and set(here) & ck else None

    victims = set(wait_for(n2_holds_checkpointed_trials, 90, "trials with checkpoints on n2"))
    cluster.kill("n2")  # kill -9: its template process then kills its trial processes
    row = cluster.wait_search(sid, 150)
    assert row.status == "completed"
    trials = _completed_every_trial(cluster, sid, spec)
    assert cluster.doubles(audit) == [], "a trial ran twice at once"
    restarted = [t for t in trials if t.id in victims and t.retries >= 1]
    assert restarted, f"none of n2's trials {victims} was restarted"
    records = cluster.audit_records(audit)
    resumed = [t.id for t in restarted if any(r["event"] == "start" and r["step"] > 0 for r in records[t.id])]
    assert resumed, "no restarted trial resumed from its checkpoint"
    with cluster.store.session() as s:
        assert s.get(NodeRow, "n2").status == "dead"


def test_killed_controller_restarts_without_duplicates_or_lost_reports(cluster: Cluster) -> None:
    audit = cluster.tmp / "audit-kill-controller"
    spec = fault_spec(audit, name="kill-controller")
    sid = cluster.submit(spec)
    wait_for(lambda: _reporting(cluster, sid, 20), 90, "reports")
    cluster.kill("controller")
    time.sleep(2.0)  # trials keep running and reporting meanwhile
    cluster.controller()
    row = cluster.wait_search(sid, 150)
    assert row.status == "completed"
    _completed_every_trial(cluster, sid, spec)
    assert cluster.doubles(audit) == [], "a trial ran twice at once"
    _reports_exactly_once(cluster, sid, audit)


def test_broker_outage_loses_no_report(cluster: Cluster) -> None:
    audit = cluster.tmp / "audit-redis"
    spec = fault_spec(audit, name="redis-outage")
    sid = cluster.submit(spec)
    wait_for(lambda: _reporting(cluster, sid, 20), 90, "reports")
    cluster.redis.stop()  # every queued message is lost with it (no persistence)
    outage_start = len(cluster.store.search_reports(sid))
    time.sleep(4.0)
    during = len(cluster.store.search_reports(sid))
    cluster.redis.start()
    row = cluster.wait_search(sid, 150)
    assert row.status == "completed"
    assert during > outage_start, "reports should keep flowing through the database while the broker is down"
    _completed_every_trial(cluster, sid, spec)
    assert cluster.doubles(audit) == [], "a trial ran twice at once"
    _reports_exactly_once(cluster, sid, audit)


def test_task_delivered_twice_starts_one_copy(cluster: Cluster) -> None:
    audit = cluster.tmp / "audit-twice"
    spec = fault_spec(audit, name="twice", budget={"max_trials": 1, "max_steps": 100000, "max_seconds": 600})
    # Stored already stopped, in one write: rows only, so the controller never creates a trial of its
    # own for it (submitting it queued and stopping it after raced the controller's claim: its trial 0
    # then collided with this one under the unique (search_id, number) index).
    parsed = parse_spec(spec)
    with cluster.store.session() as s:
        row = SearchRow(name=parsed.name, spec=parsed.model_dump(mode="json"), status="stopped", created_at=time.time())
        s.add(row)
        s.commit()
        s.refresh(row)
        sid = row.id
    assert sid is not None
    tid = cluster.store.add_trial(sid, 0, {"lr": 0.01}, {}, time.time()).id
    epoch = DbCluster(workdir=cluster.checkpoints, engine=cluster.store.engine).assign(tid, "n1")
    client = Celery("test-client", set_as_current=False)
    client.conf.update(celery_conf(cluster.redis.url))
    run = [7, [{"kind": "run", "trial_id": tid, "devices": ["n1/cpu:0"], "epoch": epoch}]]

    def starts() -> int:
        return sum(r["event"] == "start" for r in cluster.audit_records(audit).get(tid, []))

    try:
        client.send_task(APPLY_TASK, args=run, queue=queue_of("n1"))
        client.send_task(APPLY_TASK, args=run, queue=queue_of("n1"))  # a redelivery, as after a worker crash
        wait_for(lambda: tid in cluster.node_trials("n1"), 60, "the trial to run on n1")
        time.sleep(2.0)
        assert starts() == 1
        # The worker dies and comes back (same node name): the old message arrives again.
        cluster.kill("n1")
        cluster.ensure()
        seen = f"'duplicate': [{tid}]"
        before = cluster.log("n1").count(seen)
        client.send_task(APPLY_TASK, args=run, queue=queue_of("n1"))
        wait_for(lambda: cluster.log("n1").count(seen) > before, 30, "the redelivered task to be refused")
        time.sleep(2.0)
        assert starts() == 1, "a redelivered task started a second copy"
        assert tid not in cluster.node_trials("n1")
        with cluster.store.session() as s:
            applied = s.exec(select(AppliedRow).where(AppliedRow.trial_id == tid)).all()
        assert [(a.node, a.round_no) for a in applied] == [("n1", 7)]
        assert cluster.doubles(audit) == []
    finally:
        client.close()


def test_a_node_restarted_while_the_controller_is_idle_gets_work_without_a_false_loss(cluster: Cluster) -> None:
    audit = cluster.tmp / "audit-idle-restart"
    # A search first, so that the controller has seen n1 as it is now.
    small = fault_spec(audit, name="before-restart", budget={"max_trials": 1, "max_steps": 20, "max_seconds": 600})
    assert cluster.wait_search(cluster.submit(small), 60).status == "completed"
    # Then no search runs, so the controller polls nothing: it does not see n1 go and come back.
    cluster.kill("n1")
    cluster.ensure()
    spec = fault_spec(audit, name="idle-restart", budget={"max_trials": 4, "max_steps": 60, "max_seconds": 600})
    spec["parallelism"] = 4
    sid = cluster.submit(spec)
    row = cluster.wait_search(sid, 120)
    assert row.status == "completed"
    trials = _completed_every_trial(cluster, sid, spec)
    # Its first round is planned on what the nodes are now: nothing sent to the new n1 is taken back as
    # lost with the old one.
    assert [(t.id, t.retries, t.error) for t in trials if t.retries or t.error] == []
    ids = {t.id for t in trials}
    with cluster.store.session() as s:
        actions = [a for i in s.exec(select(IntentRow)) for a in i.actions if a["trial_id"] in ids]
    assert {d.split("/")[0] for a in actions for d in a.get("devices", ())} == {"n1", "n2"}
    assert cluster.doubles(audit) == []
