"""Issue 12 item 4 (the worker's side): a node agent does not trust the broker or the database to hold
only what the API let in. With an allowlist it imports no warm-up module and starts no trial outside
it, and it stops or suspends only trials it runs, under the epoch the order names. A real `NodeAgent`
with its `LocalRuntime` (template and trial processes) over `DbCluster` on SQLite."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from quanta.allowlist import Allowlist
from quanta.db.cluster import DbCluster
from quanta.db.store import Store
from quanta.devices import parse_devices
from quanta.executor.actions import Exited, Order, Run, Stop, Suspend, decode_event
from quanta.executor.runtime.node import NodeAgent
from quanta.spec import parse_spec


def spec(trainable: str) -> dict[str, Any]:
    return parse_spec(
        {
            "name": "s",
            "trainable": trainable,
            "space": {"lr": {"uniform": [0.01, 0.02]}},
            "metric": {"name": "accuracy"},
            "budget": {"max_steps": 100_000},
            "config": {"sleep_s": 0.01, "report_every": 50},
        }
    ).model_dump(mode="json")


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_node_refuses_what_is_outside_its_allowlist_and_orders_for_processes_it_does_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mods = tmp_path / "mods"
    mods.mkdir()
    for name in ("warm_ok", "warm_evil"):  # importing one leaves a marker file
        (mods / f"{name}.py").write_text(f"open({str(tmp_path / name)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(mods))  # the template inherits sys.path

    store = Store(f"sqlite:///{tmp_path / 'q.db'}")
    db = DbCluster(workdir=tmp_path / "ck", engine=store.engine)
    evil_search = store.create_search("evil", spec("tests.trainables_feedback:logreg"), time.time()).id
    good_search = store.create_search("good", spec("tests.trainables:linear"), time.time()).id
    evil = store.add_trial(evil_search, 0, {"lr": 0.01}, {"lr": [0.01]}, time.time()).id  # type: ignore[arg-type]
    good = store.add_trial(good_search, 0, {"lr": 0.01}, {"lr": [0.01]}, time.time()).id  # type: ignore[arg-type]
    assert evil is not None and good is not None

    agent = NodeAgent(
        "n1",
        parse_devices("cpu:1"),
        db,
        heartbeat_s=0.1,
        flush_s=0.02,
        allowlist=Allowlist.parse("tests.trainables,warm_ok"),
        warm_modules=["warm_evil"],
    )
    try:
        agent.warm(["warm_ok", "warm_evil"])
        wait_for("the allowed module to be warmed", (tmp_path / "warm_ok").exists)

        epoch_evil = db.assign(evil, "n1")
        done = agent.apply(1, [Order(Run(evil, ("n1/cpu:0",)), epoch_evil)])
        assert done["refused"] == [evil] and done["applied"] == []

        def exit_of(tid: int) -> Exited | None:
            for r in db.events_since({}):
                e = decode_event(r.kind, r.data)
                if isinstance(e, Exited) and e.trial_id == tid:
                    return e
            return None

        refused = wait_for("the refused trial's exit", lambda: exit_of(evil))
        assert refused.status == "failed" and "not allowed on node n1" in (refused.error or "")
        assert "tests.trainables_feedback" in (refused.error or "")

        epoch = db.assign(good, "n1")
        assert agent.apply(2, [Order(Run(good, ("n1/cpu:0",)), epoch)])["applied"] == [good]
        wait_for("the allowed trial to start", lambda: good in agent.runtime.residency())

        # Orders for trials this node does not run, or for another process of its trial: refused.
        assert agent.apply(3, [Order(Stop(evil, "forged"))])["refused"] == [evil]
        assert agent.apply(4, [Order(Stop(424242, "forged"))])["refused"] == [424242]
        assert agent.apply(5, [Order(Suspend(good), epoch + 1)])["refused"] == [good]
        assert agent.apply(6, [Order(Stop(good, "late"), epoch - 1)])["stale"] == [good]  # an older process's
        time.sleep(0.5)
        assert agent.runtime.residency()[good].running and exit_of(good) is None

        # The order the controller sends, with the process's epoch, is carried out.
        assert agent.apply(7, [Order(Stop(good, "by the controller"), epoch)])["applied"] == [good]
        stopped = wait_for("the stop", lambda: exit_of(good))
        assert stopped.status == "killed"
        assert not (tmp_path / "warm_evil").exists(), "a module outside the allowlist was imported"
    finally:
        agent.close(checkpoint_wait_s=0)
