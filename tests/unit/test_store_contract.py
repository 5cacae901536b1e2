"""One contract, two stores: the SQLModel `Store` on a temporary SQLite file and the in-memory
`MemoryStore` must answer every call the controller makes the same way (`ControllerStore`). The
service's part (`ServiceStore`: read models, commands, deletions) is `Store`'s alone, tested below."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine, text

from quanta.db.cluster import DbCluster
from quanta.db.errors import Conflict
from quanta.db.memory import MemoryStore
from quanta.db.models import (
    FIRST_ADMIN,
    ClusterView,
    DevicePlacement,
    LatencyRow,
    PairRates,
    PairRow,
    QuantumRow,
    ReportRow,
)
from quanta.db.protocol import ControllerStore, ServiceStore
from quanta.db.store import Store
from quanta.spec import parse_spec
from quanta.status import SearchStatus, TrialStatus
from tests.lifecycle_checks import assert_resumes_raise_the_budget_once_each, assert_tags_filter_exactly


@pytest.fixture(params=["sql", "memory"])
def store(request, tmp_path):
    if request.param == "sql":
        return Store(f"sqlite:///{tmp_path / 'contract.db'}")
    return MemoryStore()


def test_searches_create_update_and_filter(store):
    a = store.create_search("a", {"name": "a"}, 1.0)
    b = store.create_search("b", {"name": "b"}, 2.0)
    assert a.id is not None and b.id is not None and a.id != b.id
    assert a.status == "queued" and a.created_at == 1.0 and a.spec == {"name": "a"}
    assert [s.name for s in store.searches_needing_controller()] == ["a", "b"]
    row = store.update_search(a.id, status="running", started_at=3.0)
    assert row.status == "running" and row.started_at == 3.0
    assert [s.name for s in store.searches(("running",))] == ["a"]
    assert [s.name for s in store.searches()] == ["a", "b"]
    assert [s.name for s in store.searches_needing_controller()] == ["b"]
    store.update_search(a.id, command="stop")
    assert [s.name for s in store.searches_needing_controller()] == ["a", "b"]
    assert store.search(a.id).command == "stop"
    assert store.search(9999) is None
    with pytest.raises(KeyError):
        store.update_search(9999, status="x")


def test_a_user_name_or_a_role_in_another_case_is_refused(store):
    store.add_user("bob", 1.0)
    for name, message in (("Admin", "user admin exists: names differ in more than case"),
                          ("BOB", "user bob exists: names differ in more than case"),
                          ("bob", "user bob exists")):  # fmt: skip
        with pytest.raises(Conflict, match=message):
            store.add_user(name, 2.0)
    for role in ("Admin", "VIEWER", "Member"):
        with pytest.raises(ValueError, match="role"):
            store.add_user("carol", 3.0, role=role)
    assert store.add_user("vera", 4.0, role="viewer").role == "viewer"
    assert [u.name for u in store.users()] == [FIRST_ADMIN, "bob", "vera"]


def test_users_start_with_the_first_admin_and_keep_weights_and_quotas(store):
    assert [(u.name, u.role, u.weight, u.max_alive_trials, u.max_devices) for u in store.users()] == [
        (FIRST_ADMIN, "admin", 1.0, 0, 0)
    ]
    bob = store.add_user("bob", 5.0, weight=2.5, max_alive_trials=3)
    assert (bob.name, bob.role, bob.weight, bob.max_alive_trials, bob.max_devices, bob.created_at) == (
        "bob", "member", 2.5, 3, 0, 5.0
    )  # fmt: skip
    store.add_user("carol", 6.0, role="admin")
    with pytest.raises(Conflict):
        store.add_user("bob", 7.0)
    for bad, field in (
        (dict(weight=0.0), "weight"),
        (dict(weight=float("nan")), "weight"),
        (dict(max_devices=-1), "max_devices"),
        (dict(max_alive_trials=10**9), "max_alive_trials"),
        (dict(role="root"), "role"),
    ):
        with pytest.raises(ValueError, match=field):
            store.add_user("dave", 8.0, **bad)
        with pytest.raises(ValueError, match=field):
            store.update_user("bob", **bad)
    with pytest.raises(ValueError, match="name"):
        store.add_user("no spaces", 8.0)
    with pytest.raises(ValueError, match="created_at"):
        store.update_user("bob", created_at=1.0)  # not a setting
    assert store.user("dave") is None  # nothing half-written by the refusals
    assert store.update_user("bob", weight=0.5, max_devices=2).max_devices == 2
    assert (store.user("bob").weight, store.user("bob").max_alive_trials) == (0.5, 3)  # others unchanged
    with pytest.raises(KeyError):
        store.update_user("nobody", weight=1.0)
    assert store.user_weights() == {FIRST_ADMIN: 1.0, "bob": 0.5, "carol": 1.0}
    assert [u.name for u in store.users()] == [FIRST_ADMIN, "bob", "carol"]


def test_searches_have_an_owner(store):
    a = store.create_search("a", {}, 1.0)
    b = store.create_search("b", {}, 2.0, owner="bob")
    assert (a.owner, b.owner) == (FIRST_ADMIN, "bob")
    assert [s.owner for s in store.searches()] == [FIRST_ADMIN, "bob"]
    assert store.search(b.id).owner == "bob"


def test_a_queued_search_is_claimed_once(store):
    a = store.create_search("a", {"name": "a"}, 1.0)
    store.update_search(a.id, command="pause")
    assert store.claim_search(a.id, 2.0) is True
    row = store.search(a.id)
    assert (row.status, row.started_at, row.command) == ("running", 2.0, None)
    assert store.claim_search(a.id, 3.0) is False  # not queued any more
    assert store.search(a.id).started_at == 2.0
    assert store.claim_search(9999, 3.0) is False


def test_trials_add_update_commands(store):
    s = store.create_search("s", {}, 0.0)
    t1 = store.add_trial(s.id, 1, {"lr": 0.1}, {"lr": [0.1]}, 5.0)
    t0 = store.add_trial(s.id, 0, {"lr": 0.2}, {"lr": [0.2]}, 4.0)
    job = store.add_trial(0, 0, {"kind": "ResNet-50"}, {}, 6.0)  # a trace job: no search
    assert len({t1.id, t0.id, job.id}) == 3
    assert t1.status == "queued" and t1.steps == 0 and t1.device_seconds == 0.0 and t1.params == {"lr": 0.1}
    assert [t.number for t in store.trials(s.id)] == [0, 1]
    assert store.search(s.id).trials_created == 2
    store.update_trial(t1.id, status="running", steps=7, started_at=5.5)
    got = store.trial(t1.id)
    assert (got.status, got.steps, got.started_at) == ("running", 7, 5.5)
    assert store.trials_with_commands() == []
    store.update_trial(t0.id, command="stop")
    assert [t.id for t in store.trials_with_commands()] == [t0.id]
    store.update_trial(t0.id, command=None)
    assert store.trials_with_commands() == []
    assert store.trial(job.id).params == {"kind": "ResNet-50"}
    with pytest.raises(KeyError):
        store.update_trial(9999, status="x")


def test_measurement_rows(store):
    s = store.create_search("s", {}, 0.0)
    t = store.add_trial(s.id, 0, {}, {}, 0.0)
    store.add_rows([])
    store.add_rows(
        [
            ReportRow(trial_id=t.id, search_id=s.id, step=10, at=1.0, metrics={"acc": 0.5}, objective=0.5),
            ReportRow(trial_id=t.id, search_id=s.id, step=20, at=2.0, metrics={"acc": 0.6}, objective=0.6),
            QuantumRow(
                trial_id=t.id, search_id=s.id, devices="d0", started_at=0, ended_at=1, steps=5, rate=5, rss_mb=1
            ),
            LatencyRow(trial_id=t.id, kind="park", ms=3.0, at=1.0),
            LatencyRow(trial_id=t.id, kind="start", ms=9.0, at=0.5),
            PairRow(trial_a=1, trial_b=2, rate_a=1.0, rate_b=2.0, at=3.0),
        ]
    )
    assert [r.step for r in store.reports(t.id)] == [10, 20]
    assert [r.objective for r in store.search_reports(s.id)] == [0.5, 0.6]
    assert len(store.quanta(search_id=s.id)) == 1 and len(store.quanta(trial_id=t.id + 100)) == 0
    assert [r.kind for r in store.latencies()] == ["park", "start"]
    assert [r.ms for r in store.latencies("start")] == [9.0]
    assert [(p.trial_a, p.rate_b) for p in store.pairs()] == [(1, 2.0)]


def test_report_rows_and_the_figures_they_move_are_stored_together(store):
    """`add_rows(rows, trials)` writes each trial's (metric, best, steps) with the rows; a trial no longer
    stored is skipped, and the figures alone (no rows) are written too."""
    s = store.create_search("s", {}, 0.0)
    t = store.add_trial(s.id, 0, {}, {}, 0.0)
    report = ReportRow(trial_id=t.id, search_id=s.id, step=25, at=1.0, metrics={"acc": 0.7}, objective=0.7)
    store.add_rows([report], [(t.id, 0.7, 0.7, 25), (t.id + 100, 0.1, 0.1, 3)])
    got = store.trial(t.id)
    assert (got.metric, got.best_metric, got.steps) == (0.7, 0.7, 25)
    assert [r.step for r in store.reports(t.id)] == [25]
    store.add_rows([], [(t.id, 0.6, 0.7, 50)])
    got = store.trial(t.id)
    assert (got.metric, got.best_metric, got.steps) == (0.6, 0.7, 50)
    assert store.trial(t.id + 100) is None
    # A search's figures those reports moved go in the same write; a search no longer stored is skipped.
    later = ReportRow(trial_id=t.id, search_id=s.id, step=50, at=2.0, metrics={"acc": 0.8}, objective=0.8)
    fields = {"best_trial_id": t.id, "best_metric": 0.8, "best_params": {"lr": 0.1}, "reached": True}
    store.add_rows([later], [(t.id, 0.8, 0.8, 50)], {s.id: fields, s.id + 100: {"best_metric": 0.1}})
    row = store.search(s.id)
    assert (row.best_trial_id, row.best_metric, row.best_params, row.reached) == (t.id, 0.8, {"lr": 0.1}, True)
    assert [r.step for r in store.reports(t.id)] == [25, 50] and store.search(s.id + 100) is None


def test_intents_and_state(store):
    assert store.last_intent() is None
    store.record_intent(1, 1.0, [{"kind": "run", "trial_id": 1, "devices": ["d0"]}])
    store.record_intent(2, 2.0, [{"kind": "suspend", "trial_id": 1, "checkpoint": False}])
    last = store.last_intent()
    assert last.round_no == 2 and last.actions[0]["kind"] == "suspend"
    assert store.round_no() == 2  # stored with the intent, in the same transaction
    # The plan's state, when given, goes in that transaction too.
    store.record_intent(3, 3.0, [], ("asha", {"rungs": {"1": (1, 2)}}, {"1": {"at": 20}}))
    assert store.round_no() == 3 and store.last_intent().actions == []
    assert store.policy_state() == {"rungs": {"1": [1, 2]}} and store.judge_state() == {"1": {"at": 20}}


def test_controller_state(store):
    assert store.round_no() == 0 and store.policy_state() == {} and store.cluster_view() is None
    store.save_round_no(3)
    store.save_round_no(4)
    assert store.round_no() == 4
    store.save_policy_state("fifo", {"offsets": {"1": 0.5}, "pair": (1, 2)})
    # JSON semantics: tuples come back as lists.
    assert store.policy_state() == {"offsets": {"1": 0.5}, "pair": [1, 2]}
    assert store.judge_state() == {}
    assert store.round_no() == 4  # one row, two facts: saving one keeps the other
    # The judge's state is saved with the policy's (one write a plan) and read back the same way.
    store.save_policy_state("gandiva", {"rank": [2, 1]}, judge={"1": {"at": 30, "p": 0.5, "families": ("pow3",)}})
    assert store.policy_state() == {"rank": [2, 1]}
    assert store.judge_state() == {"1": {"at": 30, "p": 0.5, "families": ["pow3"]}}
    view = ClusterView(
        at=5.0,
        devices=(DevicePlacement("cpu:0", "local", "cpu", 100.0, running=(1,), parked=(2,)),),
        pairs=(PairRates(1, 2, 3.0, 4.0, solo_a=5.0),),
        notes=("packed 1+2",),
        round_no=4,
    )
    store.publish_cluster_view(view)
    assert store.cluster_view() == view
    idle = ClusterView.idle(6.0, [view.devices[0]])
    store.publish_cluster_view(idle)
    assert store.cluster_view() == idle and idle.devices[0].running == () and idle.round_no == 0


def test_a_fork_is_carried_out_in_steps_that_never_touch_its_parent(store):
    sid = store.create_search("s", {}, 1.0).id
    parent = store.add_trial(sid, 0, {"lr": 0.1, "opt": {"m": 0.9}}, {"lr": [0.1], "opt/m": [0.9]}, 1.0)
    store.update_trial(parent.id, status="running", steps=30, checkpoint_step=20)
    with pytest.raises(KeyError):
        store.add_fork_request(9999, {}, None, 2.0)
    req = store.add_fork_request(parent.id, {"lr": 0.01}, 50, 2.0, requested_by=1)
    other = store.add_fork_request(parent.id, {}, None, 2.5)
    assert (req.status, req.search_id, req.child_id, req.values, req.steps) == ("pending", sid, None, {"lr": 0.01}, 50)
    assert [f.id for f in store.fork_requests(("pending",))] == [req.id, other.id]

    child = store.start_fork(req.id, 1, {"lr": 0.01, "opt": {"m": 0.9}}, {"lr": [0.01], "opt/m": [0.9]}, None, 3.0)
    assert (child.parent_id, child.fork_step, child.number, child.status) == (parent.id, None, 1, "queued")
    assert store.search(sid).trials_created == 2
    assert [(f.id, f.child_id) for f in store.fork_requests(("copying",))] == [(req.id, child.id)]
    store.finish_fork(req.id, 30, 4.0, 80)
    done = store.trial(child.id)
    assert (done.fork_step, done.checkpoint_step, done.steps, done.max_steps) == (30, 30, 30, 80)
    assert store.fork_requests(("done",))[0].finished_at == 4.0
    (change,) = store.config_changes(child.id)
    assert (change.step, change.values, change.cause, change.source_id) == (30, {"lr": 0.01}, "fork", parent.id)

    failing = store.start_fork(other.id, 2, {"lr": 0.1}, {"lr": [0.1]}, None, 5.0)
    store.fail_fork(other.id, "the write failed", 6.0)
    (failed,) = store.fork_requests(("failed",))
    assert failed.error == "the write failed" and store.trial(failing.id).status == "failed"
    assert "the write failed" in store.trial(failing.id).error

    store.record_config_change(parent.id, 31, 7.0, {"lr": 0.05}, {"lr": 0.05, "opt": {"m": 0.9}})
    assert store.trial(parent.id).params == {"lr": 0.05, "opt": {"m": 0.9}}
    assert [(c.step, c.cause) for c in store.config_changes(parent.id)] == [(31, "set")]
    p = store.trial(parent.id)  # the fork wrote nothing of its parent's but its parameters' change
    assert (p.status, p.steps, p.checkpoint_step, p.parent_id, p.fork_step) == ("running", 30, 20, None, None)


def test_an_exploit_is_stored_as_it_moves_on_and_writes_its_target_only_when_done(store):
    sid = store.create_search("s", {}, 1.0).id
    target = store.add_trial(sid, 0, {"lr": 0.1}, {"lr": [0.1]}, 1.0)
    source = store.add_trial(sid, 1, {"lr": 0.2}, {"lr": [0.2]}, 1.0)
    store.update_trial(target.id, status="running", steps=25, checkpoint_step=20)
    with pytest.raises(KeyError):
        store.add_exploit(9999, source.id, {}, 2.0)
    x = store.add_exploit(target.id, source.id, {"lr": 0.24}, 2.0)
    assert (x.status, x.parent_id, x.child_id, x.steps) == ("exploit-staging", source.id, target.id, None)
    store.stage_exploit(x.id, 30)
    (staged,) = store.fork_requests(("exploit-staged",))
    assert (staged.id, staged.steps) == (x.id, 30)
    t = store.trial(target.id)  # nothing of the target's is written before the exploit is done
    assert (t.steps, t.checkpoint_step, t.params) == (25, 20, {"lr": 0.1}) and store.config_changes(target.id) == []
    store.finish_exploit(x.id, {"lr": 0.24}, 3.0)
    t = store.trial(target.id)
    assert (t.steps, t.checkpoint_step, t.params, t.parent_id) == (30, 30, {"lr": 0.24}, None)
    (change,) = store.config_changes(target.id)
    assert (change.step, change.values, change.cause, change.source_id) == (30, {"lr": 0.24}, "exploit", source.id)
    assert store.fork_requests(("exploited",))[0].finished_at == 3.0

    y = store.add_exploit(target.id, source.id, {"lr": 0.3}, 4.0)
    store.abandon_exploit(y.id, "the controller restarted", 5.0)
    (gone,) = store.fork_requests(("exploit-abandoned",))
    assert (gone.id, gone.error) == (y.id, "the controller restarted")
    assert store.trial(target.id).params == {"lr": 0.24} and len(store.config_changes(target.id)) == 1
    assert store.fork_requests(("pending", "copying", "done", "failed")) == []  # not fork requests
    if isinstance(store, Store):  # the API shows requests only
        assert store.fork_out(x.id) is None and store.lineage(sid).forks == []


def test_which_contract_each_store_keeps(store):
    assert isinstance(store, ControllerStore)
    # The service's readers' queries and deletions are SQL only (see quanta.db.protocol).
    assert isinstance(store, ServiceStore) == isinstance(store, Store)


# ---- the service's part: Store only ------------------------------------------------------------------


@pytest.fixture
def sql(tmp_path):
    return Store(f"sqlite:///{tmp_path / 'service.db'}")


SPEC = {
    "name": "s",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"uniform": [0.0, 1.0]}},
    "metric": {"name": "loss", "goal": "minimize", "target": 0.1},
    "budget": {"max_trials": 7},
}


def test_search_read_models_come_from_the_parsed_spec(sql):
    out = sql.submit_search(parse_spec(SPEC), 10.0)
    assert out.status == SearchStatus.QUEUED and out.progress.max_trials == 7 and out.policy == "asha"
    assert (out.metric.name, out.metric.goal, out.metric.target) == ("loss", "minimize", 0.1)
    t = sql.add_trial(out.id, 0, {"lr": 0.5}, {"lr": [0.5]}, 11.0)
    sql.update_trial(t.id, status=TrialStatus.COMPLETED, metric=float("nan"))
    got = sql.search_out(out.id)
    assert got.progress.trials_done == 1 and got.progress.trials_created == 1
    page, total = sql.trial_page(out.id, 0, 10)
    assert total == 1 and page[0].status == "completed" and page[0].metric is None  # NaN is not JSON
    assert sql.search_page(0, 10, status=SearchStatus.RUNNING) == ([], 0)
    assert [s.id for s in sql.search_page(0, 10)[0]] == [out.id]
    assert sql.search_out(out.id + 1) is None and not sql.has_search(out.id + 1)


def test_best_curve_follows_the_metric_goal(sql):
    sid = sql.submit_search(parse_spec(SPEC), 0.0).id  # minimize
    sql.update_search(sid, started_at=1.0)
    t = sql.add_trial(sid, 0, {}, {}, 0.0)
    sql.add_rows(
        ReportRow(trial_id=t.id, search_id=sid, step=i, at=1.0 + i, metrics={}, objective=v)
        for i, v in enumerate([0.5, 0.7, 0.4, float("inf"), 0.45, 0.2])
    )
    assert sql.best_curve(sid).points == [(0.0, 0.5), (2.0, 0.4), (5.0, 0.2)]
    assert sql.best_curve(sid + 1) is None


def test_commands_and_conflicts(sql):
    sid = sql.submit_search(parse_spec(SPEC), 0.0).id
    with pytest.raises(Conflict):
        sql.command_search(sid, "pause", 1.0)  # queued: only stop applies
    assert sql.command_search(sid, "stop", 1.0).status == SearchStatus.STOPPED  # not started: stopped at once
    run = sql.submit_search(parse_spec(SPEC), 0.0).id
    sql.update_search(run, status=SearchStatus.RUNNING, started_at=1.0)
    assert sql.command_search(run, "pause", 2.0).status == SearchStatus.RUNNING
    assert sql.search(run).command == "pause"
    assert sql.command_search(run + 10, "stop", 2.0) is None
    t = sql.add_trial(run, 0, {}, {}, 0.0)
    assert sql.stop_trial(t.id).id == t.id and sql.trial(t.id).command == "stop"
    sql.update_trial(t.id, status=TrialStatus.KILLED)
    with pytest.raises(Conflict):
        sql.stop_trial(t.id)


def test_deletion_requests_survive_and_delete_everything(sql, tmp_path):
    sid = sql.submit_search(parse_spec(SPEC), 0.0).id
    assert sql.delete_if_queued(sid) and not sql.has_search(sid)
    sid = sql.submit_search(parse_spec(SPEC), 0.0).id
    sql.update_search(sid, status=SearchStatus.RUNNING, started_at=1.0)
    assert not sql.delete_if_queued(sid)
    t = sql.add_trial(sid, 0, {}, {}, 0.0)
    sql.add_rows([ReportRow(trial_id=t.id, search_id=sid, step=1, at=1.0, metrics={}, objective=0.1)])
    sql.request_delete(sid, 2.0)
    sql.request_delete(sid, 3.0)  # asked twice: one request
    assert Store(sql.url).pending_deletes() == [sid]  # another process (a restarted one) sees it
    fork = sql.add_fork_request(t.id, {}, None, 2.0)
    sql.record_config_change(t.id, 1, 2.0, {"lr": 0.1}, {"lr": 0.1})
    sql.delete_search(sid)
    assert sql.pending_deletes() == [] and sql.trial(t.id) is None and sql.search_reports(sid) == []
    assert sql.fork_out(fork.id) is None and sql.config_changes(t.id) == [] and sql.lineage(sid) is None


def test_a_legacy_key_value_table_is_imported_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    legacy = {
        "controller": {"round_no": 41},
        "policy": {"name": "gandiva", "state": {"passes": {"3": 1.5}, "trials": {"3": {"pred": {"at": 9, "p": 0.4}}}}},
        "cluster": {
            "at": 9.0,
            "devices": [{"id": "cpu:0", "node": "local", "kind": "cpu", "memory_mb": None, "running": [3]}],
            "pairs": [],
            "notes": [],
        },
        "cluster_cursor": {"handled": {"n1": 2}, "returned": {"n1": 4, "n2": 1}},
        "delete:7": {"at": 5.0},
    }
    with engine.begin() as c:
        c.execute(text("CREATE TABLE controller_state (key VARCHAR PRIMARY KEY, value JSON NOT NULL)"))
        for k, v in legacy.items():
            c.execute(text("INSERT INTO controller_state VALUES (:k, :v)"), {"k": k, "v": json.dumps(v)})
    store = Store(url)
    assert store.round_no() == 41 and store.policy_state()["passes"] == {"3": 1.5}
    assert store.judge_state() == {"3": {"at": 9, "p": 0.4}}  # the predictions gandiva kept then
    assert store.cluster_view().devices[0].running == (3,) and store.cluster_view().at == 9.0
    assert store.pending_deletes() == [7]
    cluster = DbCluster(engine=store.engine)
    assert cluster.load_cursor() == {"handled": {"n1": 2}, "returned": {"n1": 4, "n2": 1}}
    store.save_round_no(42)
    assert Store(url).round_no() == 42  # imported once: reopening does not bring 41 back


def test_a_column_added_later_is_added_to_an_existing_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'before-judge.db'}"
    with create_engine(url).begin() as c:  # the controller table as it was before judge_state
        c.execute(text("CREATE TABLE controller (id INTEGER PRIMARY KEY, round_no INTEGER NOT NULL, "
                       "policy VARCHAR, policy_state JSON NOT NULL)"))  # fmt: skip
        c.execute(text("""INSERT INTO controller VALUES (1, 5, 'gandiva', '{"rank": [1]}')"""))
    store = Store(url)
    assert store.round_no() == 5 and store.policy_state() == {"rank": [1]} and store.judge_state() == {}
    store.save_policy_state("gandiva", {"rank": [2]}, judge={"2": {"at": 3}})
    assert Store(url).judge_state() == {"2": {"at": 3}}


def test_searches_of_a_database_from_before_users_belong_to_the_first_admin(tmp_path):
    url = f"sqlite:///{tmp_path / 'before-users.db'}"
    with create_engine(url).begin() as c:  # the search table as it was before owners
        c.execute(text("CREATE TABLE search (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, spec JSON NOT NULL, "
                       "status VARCHAR NOT NULL, created_at FLOAT NOT NULL, started_at FLOAT, finished_at FLOAT, "
                       "best_trial_id INTEGER, best_metric FLOAT, best_params JSON, reached BOOLEAN NOT NULL, "
                       "reached_at FLOAT, seconds_to_target FLOAT, trials_created INTEGER NOT NULL, "
                       "command VARCHAR, error TEXT)"))  # fmt: skip
        c.execute(text("""INSERT INTO search (id, name, spec, status, created_at, reached, trials_created)
                          VALUES (1, 'old', '{}', 'completed', 1.0, 0, 0)"""))  # fmt: skip
    store = Store(url)
    assert store.search(1).owner == FIRST_ADMIN and store.search_out(1).owner == FIRST_ADMIN
    assert [(u.name, u.role) for u in store.users()] == [(FIRST_ADMIN, "admin")]
    assert store.create_search("new", {}, 2.0, owner="bob").owner == "bob"
    with create_engine(url).connect() as c:
        indexes = {r[1] for r in c.execute(text("PRAGMA index_list('search')"))}
    assert "ix_search_owner" in indexes
    again = Store(url)  # reopening adds nothing twice
    assert [u.name for u in again.users()] == [FIRST_ADMIN] and again.search(1).owner == FIRST_ADMIN


def test_resumes_raise_the_budget_once_each(sql):
    assert_resumes_raise_the_budget_once_each(sql)


def test_tags_filter_exactly(sql):
    assert_tags_filter_exactly(sql)
