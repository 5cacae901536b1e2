"""A search's lifecycle through the real `quanta` CLI: Ctrl-C during `quanta run` prints the best so far
and how to resume; `quanta resume` takes the stopped search up again (its interrupted trials from their
checkpoints, new configurations only, more trials); `quanta tag` and `quanta delete` on a database; and
the same commands against a running server (`--url`), through the SDK client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from quanta.cli import app as cli
from quanta.db.store import Store
from quanta.sdk.client import ApiError, Client
from tests.integration.live_server import TOKEN, LiveServer, start_server

ROOT = Path(__file__).resolve().parents[2]

SPEC = {
    "name": "lifecycle",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.003, 0.1]}, "hidden": {"choice": [8, 32]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 1.5},  # never reached: runs to its budget
    "budget": {"max_trials": 3, "max_steps": 400, "max_seconds": 120},
    "parallelism": 2,
    "search": {"algorithm": "random"},
    "scheduler": {"policy": "timeslice", "quantum_s": 0.3},
    "config": {"report_every": 50, "sleep_s": 0.01},
}


def quanta(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "quanta.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def wait_for(cond, timeout: float, what: str):  # noqa: ANN001, ANN201
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_ctrl_c_prints_the_best_so_far_and_quanta_resume_goes_on_with_more_trials(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    url, work = f"sqlite:///{tmp_path}/q.db", tmp_path / "work"
    log = tmp_path / "run.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as out:
        # A session of its own: SIGINT goes to the whole group, as a terminal's Ctrl-C does.
        proc = subprocess.Popen(
            [sys.executable, "-m", "quanta.cli", "run", str(spec_path), "--devices", "cpu:2", "--db", url,
             "--workdir", str(work)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            # Ctrl-C as a terminal's foreground job has it, whatever this process inherited.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
    try:
        store = wait_for(lambda: (tmp_path / "q.db").exists() and Store(url), 60, "the database")

        def two_trials_under_way() -> bool:
            trials = store.trials(1) if store.search(1) else []
            return len(trials) == 2 and all(t.steps >= 120 for t in trials) and store.search(1).best_metric is not None

        wait_for(two_trials_under_way, 90, "two trials under way")
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = log.read_text()
    assert code == 130, output
    row = store.search(1)
    assert row.status == "stopped" and row.best_trial_id is not None
    assert f"best so far: trial {row.best_trial_id} " in output
    assert f"accuracy = {row.best_metric:.6g}" in output
    assert f"config: {json.dumps(row.best_params, sort_keys=True)}" in output and '"hidden"' in output
    assert f"resume it: quanta resume 1 --db {url} --workdir {work}" in output
    interrupted = {t.id: t for t in store.trials(1)}
    assert {t.status for t in interrupted.values()} == {"stopped"}
    assert {t.reason for t in interrupted.values()} == {"interrupted"}
    assert all(t.checkpoint_step and t.checkpoint_step >= 120 for t in interrupted.values())  # written as it stopped

    out = tmp_path / "resumed.json"
    done = quanta("resume", "1", "--db", url, "--workdir", str(work), "--devices", "cpu:2", "--trials", "1",
                  "--output", str(out))  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr  # ran to its budget; the target is out of reach
    result = json.loads(out.read_text())
    assert result["status"] == "completed" and result["search_id"] == 1
    trials = result["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]  # 3 of the spec's budget + 1 more
    assert all(t["status"] == "completed" and t["steps"] == 400 for t in trials)
    assert len({(t["params"]["lr"], t["params"]["hidden"]) for t in trials}) == 4  # no configuration twice
    for tid, before in interrupted.items():  # from its checkpoint on, not from the start
        later = [r.step for r in store.reports(tid) if r.attempt > 0]
        assert later and min(later) >= before.checkpoint_step
    assert store.search(1).spec["budget"]["max_trials"] == 4
    assert "wall time" in done.stdout and "4 completed" in done.stdout

    again = quanta("resume", "1", "--db", url, "--workdir", str(work))  # nothing left to do: refused, named
    assert again.returncode == 2 and "give more" in again.stderr, again.stderr


def _search_in(tmp_path: Path) -> tuple[str, Store]:
    url = f"sqlite:///{tmp_path}/q.db"
    store = Store(url)
    sid = store.create_search("mine", {"name": "mine"}, time.time()).id
    store.update_search(sid, status="completed", started_at=time.time(), finished_at=time.time())
    store.add_trial(sid, 0, {"lr": 0.1}, {"lr": [0.1]}, time.time())
    (tmp_path / "work" / f"search-{sid}").mkdir(parents=True)
    return url, store


def test_quanta_tag_and_delete_on_a_database(tmp_path):
    url, store = _search_in(tmp_path)
    runner = CliRunner()
    r = runner.invoke(cli, ["tag", "1", "bert", "lr-sweep", "--note", "first try", "--db", url])
    assert r.exit_code == 0 and "tags bert, lr-sweep" in r.output and "notes: first try" in r.output, r.output
    r = runner.invoke(cli, ["tag", "1", "-r", "bert", "best", "--db", url])
    assert r.exit_code == 0 and store.search_out(1).tags == ["lr-sweep", "best"], r.output
    assert store.search_out(1).notes == "first try"  # left as it was
    assert [s.id for s in store.search_page(0, 10, tag="best")[0]] == [1]
    r = runner.invoke(cli, ["tag", "1", "not a tag!", "--db", url])
    assert r.exit_code == 2 and "tags" in r.output and store.search_out(1).tags == ["lr-sweep", "best"], r.output
    r = runner.invoke(cli, ["tag", "1", "--note", "x" * 5000, "--db", url])
    assert r.exit_code == 2 and "notes" in r.output, r.output
    r = runner.invoke(cli, ["tag", "7", "x", "--db", url])
    assert r.exit_code == 2 and "search 7 not found" in r.output

    r = runner.invoke(cli, ["delete", "1", "--db", url, "--workdir", str(tmp_path / "work")])
    assert r.exit_code == 2 and "--yes" in r.output and store.search(1) is not None  # nobody to ask: not deleted
    r = runner.invoke(cli, ["delete", "1", "--db", url, "--workdir", str(tmp_path / "work"), "--yes"])
    assert r.exit_code == 0 and "deleted" in r.output, r.output
    assert store.search(1) is None and store.trials(1) == [] and not (tmp_path / "work" / "search-1").exists()
    r = runner.invoke(cli, ["delete", "1", "--db", url, "--yes"])
    assert r.exit_code == 2 and "not found" in r.output


def test_quanta_delete_is_refused_while_a_controller_runs_on_the_database(tmp_path):
    from quanta.db.lease import ControllerLease

    url, store = _search_in(tmp_path)
    lease = ControllerLease(url)
    lease.acquire()
    try:
        r = CliRunner().invoke(cli, ["delete", "1", "--db", url, "--yes"])
    finally:
        lease.release()
    assert r.exit_code == 2 and "--url" in r.output and store.search(1) is not None, r.output


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> LiveServer:
    srv = start_server(tmp_path_factory.mktemp("lifecycle-serve"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_resume_tag_and_delete_against_a_server(server):
    remote = ["--url", server.url, "--token", TOKEN]
    with Client(server.url, TOKEN) as client:
        search = client.submit(
            {**SPEC, "parallelism": 3, "budget": {"max_trials": 2, "max_steps": 20000, "max_seconds": 120}}
        )
        r = quanta("tag", str(search.id), "baseline", "cpu", "--note", "the first one", *remote)
        assert r.returncode == 0 and "tags baseline, cpu" in r.stdout, r.stdout + r.stderr
        assert [s.id for s in client.searches(tag="baseline")] == [search.id]
        assert search.refresh().tags == ["baseline", "cpu"] and search.notes == "the first one"

        wait_for(lambda: search.refresh().data["progress"]["trials_created"] == 2, 60, "two trials")
        search.stop()
        search.wait(timeout=60, poll_s=0.3)
        assert search.status == "stopped"
        r = quanta("resume", str(search.id), "--trials", "1", *remote)
        assert r.returncode == 0 and "resume requested" in r.stdout and "3 trials" in r.stdout, r.stdout + r.stderr
        wait_for(lambda: search.refresh().status == "running", 30, "the search running again")
        wait_for(lambda: len(search.trials(frame=False)) == 3, 60, "a third trial")
        trials = search.trials(frame=False)
        assert [t["number"] for t in trials] == [0, 1, 2]
        assert sum(t["status"] in ("queued", "running") for t in trials) == 3  # the stopped two go on
        with pytest.raises(ApiError) as refused:  # running, and no budget added: nothing to do
            search.resume()
        assert refused.value.status_code == 409

        r = quanta("delete", str(search.id), *remote)  # no terminal to ask on
        assert r.returncode == 2 and "--yes" in r.stderr
        r = quanta("delete", str(search.id), "--yes", *remote)
        assert r.returncode == 0 and f"search {search.id}" in r.stdout, r.stdout + r.stderr
        wait_for(lambda: not [s for s in client.searches() if s.id == search.id], 30, "the search deleted")
        with pytest.raises(ApiError) as gone:
            client.search(search.id)
        assert gone.value.status_code == 404
