"""The Python SDK (`quanta.sdk.Client`), `quanta submit` and examples/sdk_submit.py against a live
`quanta serve` on a free port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from quanta.sdk import ApiError, Client
from tests.integration.live_server import ROOT, TOKEN, start_server

SPEC = {
    "name": "sdk",
    "trainable": "tests.trainables:linear",
    "space": {"lr": {"loguniform": [0.005, 0.1]}},
    "metric": {"name": "accuracy", "goal": "maximize", "target": 0.85},
    "budget": {"max_trials": 4, "max_steps": 60},
    "parallelism": 2,
    "scheduler": {"quantum_s": 0.5},
    "config": {"report_every": 5, "sleep_s": 0.005},
}
UNREACHABLE = {**SPEC, "name": "unreachable", "metric": {"name": "accuracy", "target": 2.0},
               "budget": {"max_trials": 2, "max_steps": 15}}  # fmt: skip
SLOW = {**SPEC, "name": "slow", "metric": {"name": "accuracy", "target": 2.0},
        "budget": {"max_trials": 10, "max_steps": 100_000}, "config": {"sleep_s": 0.01}}  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("sdk"))
    try:
        srv.wait_ready()
        yield srv
    finally:
        code = srv.stop()
    assert code == 0, srv.log()  # SIGTERM: a graceful stop
    assert "stopping: checkpointing trials" in srv.log()


@pytest.fixture
def client(server):
    with Client(server.url, server.token) as c:
        yield c


def test_submit_wait_best_trials(client):
    search = client.submit(SPEC)
    assert search.id > 0 and search.status in ("queued", "running")
    search.wait(timeout=120, poll_s=0.3)
    assert search.status == "completed" and search.reached
    best = search.best()
    assert best is not None and best["metric"] >= 0.85 and "lr" in best["params"]
    trials = search.trials(frame=False)
    assert trials and sorted(t["number"] for t in trials) == list(range(len(trials)))
    assert any(t["id"] == best["trial_id"] for t in trials)
    detail = client.trial(best["trial_id"])
    assert detail["curve"] and detail["curve"][-1]["objective"] is not None
    assert search.id in [s.id for s in client.searches()]
    assert client.search(search.id).reached


def test_submit_yaml_file_and_text(client, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SLOW, "name": "from-file"}))
    a = client.submit(path)
    b = client.submit(str(path))
    c = client.submit(yaml.safe_dump({**SLOW, "name": "from-text"}))
    assert (a.name, b.name, c.name) == ("from-file", "from-file", "from-text")
    for s in (a, b, c):
        s.stop()
        assert s.wait(timeout=60, poll_s=0.3).status == "stopped"


def test_events_follow_a_search(client):
    search = client.submit(SLOW)
    kinds: set[str] = set()
    try:
        for event in client.events(search_id=search.id, max_seconds=60):
            kinds.add(event.event)
            if event.event == "report":
                assert event.data["search_id"] == search.id and "accuracy" in event.data["metrics"]
            if {"search", "trial", "report"} <= kinds:
                break
    finally:
        search.stop()
    assert {"search", "trial", "report"} <= kinds
    assert search.wait(timeout=60, poll_s=0.3).status == "stopped"
    trials = search.trials(frame=False)
    assert trials and all(t["status"] in ("stopped", "completed") for t in trials)
    assert all(t["reason"] == "search stopped by user" for t in trials if t["status"] == "stopped")


def test_errors_are_raised_with_the_servers_detail(client, server):
    with pytest.raises(ApiError) as err:
        client.submit({**SPEC, "trainable": "os:system"})
    assert err.value.status_code == 403 and "'os:system' is not allowed" in str(err.value)
    with pytest.raises(ApiError) as err:
        client.submit({**SPEC, "budget": {"max_steps": 0}})
    assert err.value.status_code == 422 and err.value.detail[0]["loc"] == "budget.max_steps"
    with pytest.raises(ApiError) as err:
        client.search(10**9)
    assert err.value.status_code == 404
    with Client(server.url, "wrong-token") as bad, pytest.raises(ApiError) as err:
        bad.searches()
    assert err.value.status_code == 401
    env = {k: v for k, v in os.environ.items() if k != "QUANTA_TOKEN"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", env)
        with pytest.raises(ValueError):
            Client(server.url)


def test_server_routes_outside_the_api(server):
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok", "controller": "running"}
    assert httpx.get(server.url + "/").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 401
    metrics = httpx.get(server.url + "/metrics", headers=server.headers).text
    assert "quanta_trials" in metrics and "quanta_mechanism_latency_seconds_bucket" in metrics
    cluster = httpx.get(server.url + "/api/v1/cluster", headers=server.headers).json()
    assert [d["id"] for d in cluster["devices"]] == ["cpu:0", "cpu:1"]


def _run(args: list[str], env_extra: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_quanta_submit_exit_codes(server, tmp_path):
    good, miss, bad = tmp_path / "good.yaml", tmp_path / "miss.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump({**SPEC, "name": "cli-good"}))
    miss.write_text(yaml.safe_dump({**UNREACHABLE, "name": "cli-miss"}))
    bad.write_text(yaml.safe_dump({**SPEC, "budget": {"max_steps": -1}}))
    env = {"QUANTA_TOKEN": TOKEN}
    base = ["-m", "quanta.cli", "submit", "--url", server.url]
    started = time.monotonic()
    r = _run([*base, str(good), "--wait"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"reached": true' in r.stdout
    r = _run([*base, str(miss), "--wait"], env)
    assert r.returncode == 3, r.stdout + r.stderr
    r = _run([*base, str(bad), "--wait"], env)
    assert r.returncode == 2 and "budget.max_steps" in r.stderr
    r = _run([*base, str(tmp_path / "missing.yaml")], env)
    assert r.returncode == 2
    r = _run([*base, str(good)], {"QUANTA_TOKEN": ""})
    assert r.returncode == 2 and "token" in r.stderr
    r = _run([*base, str(good)], env)  # without --wait: accepted is success
    assert r.returncode == 0 and "search" in r.stdout
    assert time.monotonic() - started < 150


def test_example_script(server, tmp_path):
    spec = tmp_path / "example.yaml"
    spec.write_text(yaml.safe_dump({**SPEC, "name": "example"}))
    r = _run(["examples/sdk_submit.py", str(spec), "--url", server.url], {"QUANTA_TOKEN": TOKEN})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "target reached: True" in r.stdout and "top 3" in r.stdout
    assert f"dashboard: {server.url}/#/search/" in r.stdout  # the dashboard routes on the fragment


def test_quanta_submit_prints_the_searchs_dashboard_link(server, client, tmp_path):
    path = tmp_path / "link.yaml"
    path.write_text(yaml.safe_dump({**SLOW, "name": "link"}))
    r = _run(["-m", "quanta.cli", "submit", str(path), "--url", server.url + "/"], {"QUANTA_TOKEN": TOKEN})
    assert r.returncode == 0, r.stdout + r.stderr
    sid = int(r.stdout.split()[1])
    assert f"{server.url}/#/search/{sid}" in r.stdout.split(), r.stdout  # one slash, the fragment route
    assert "?search=" not in r.stdout
    client.search(sid).stop().wait(timeout=60, poll_s=0.3)


def test_pause_returns_the_paused_search(client):
    search = client.submit({**SLOW, "name": "pause"})
    deadline = time.monotonic() + 60
    while search.refresh().status != "running":
        assert time.monotonic() < deadline, search.status
        time.sleep(0.2)
    assert search.pause(timeout=30) is search
    assert search.status == "paused" and search.data["status"] == "paused"
    assert client.search(search.id).status == "paused"  # what the server says too
    search.stop()
    assert search.wait(timeout=60, poll_s=0.3).status == "stopped"


def test_trials_without_pandas_raise_naming_the_extra(client, server):
    search = client.submit({**UNREACHABLE, "name": "no-pandas"}).wait(timeout=120, poll_s=0.3)
    script = (
        "import sys\n"
        "sys.modules['pandas'] = None  # as without the notebook extra: `import pandas` raises ImportError\n"
        "from quanta.sdk import Client\n"
        f"search = Client({server.url!r}).search({search.id})\n"
        "print(len(search.trials(frame=False)))\n"
        "try:\n"
        "    search.trials()\n"
        "except ImportError as exc:\n"
        "    print('ImportError:', exc)\n"
        "else:\n"
        "    print('no error')\n"
    )
    r = _run(["-c", script], {"QUANTA_TOKEN": TOKEN})
    assert r.returncode == 0, r.stdout + r.stderr
    count, error = r.stdout.splitlines()
    assert count == "2"
    assert error.startswith("ImportError:") and "pip install 'quanta[notebook]'" in error, error


# ---- the CLI against the service: status, logs, stop, export -------------------------------------


def _quanta(server, *args: str):
    from typer.testing import CliRunner

    from quanta.cli import app as cli

    return CliRunner().invoke(cli, [*args, "--url", server.url], env={"QUANTA_TOKEN": server.token})


def test_status_logs_stop_and_export_through_the_cli(client, server, tmp_path):
    chatty = {**SPEC, "name": "chatty", "trainable": "tests.trainables:chatty",
              "budget": {"max_trials": 2, "max_steps": 30}, "metric": {"name": "accuracy", "target": 2.0}}  # fmt: skip
    done = client.submit(chatty).wait(timeout=120, poll_s=0.3)
    assert done.status == "completed"
    trials = done.trials(frame=False)

    res = _quanta(server, "status")
    assert res.exit_code == 0, res.output
    assert "chatty" in res.stdout and "completed" in res.stdout
    res = _quanta(server, "status", str(done.id))
    assert res.exit_code == 0, res.output
    assert f"search {done.id} (chatty): completed" in res.stdout and "2 completed" in res.stdout
    res = _quanta(server, "status", str(done.id), "--json")
    assert [t["id"] for t in json.loads(res.stdout)["trials"]] == [t["id"] for t in trials]

    # The trial's stdout and stderr, as the service kept them.
    tid = trials[0]["id"]
    res = _quanta(server, "logs", str(tid))
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert f"chatty trial {tid} stdout step 0" in lines and f"chatty trial {tid} stderr step 29" in lines
    res = _quanta(server, "logs", str(tid), "--tail", "40")
    assert res.stdout.strip() == f"chatty trial {tid} stderr step 29"  # whole lines from the end

    res = _quanta(server, "export", str(done.id), "-f", "csv", "-o", str(tmp_path / "t.csv"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t.csv").read_text().splitlines()[0].startswith("trial_id,number,parent_id,fork_step,status")
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 3

    slow = client.submit(SLOW)
    res = _quanta(server, "stop", str(slow.id))
    assert res.exit_code == 0 and "stop requested" in res.stdout, res.output
    assert slow.wait(timeout=60, poll_s=0.3).status == "stopped"
    res = _quanta(server, "stop", str(slow.id))
    assert res.exit_code == 2 and "409" in res.output  # already stopped
    for args in (("status", "999999"), ("logs", "999999")):
        res = _quanta(server, *args)
        assert res.exit_code == 2 and "404" in res.output, res.output
    res = _quanta_without_token(server)
    assert res.exit_code == 2 and "no token" in res.output


def test_fork_through_the_cli_and_the_sdk(client, server):
    """`quanta fork` and `Client.fork` start a new trial from a running trial's state with a new learning
    rate; the lineage says so; bad input is refused naming the parameter (exit 2)."""
    spec = {**SLOW, "name": "forking", "space": {"lr": {"loguniform": [0.005, 0.1], "mutable": True}},
            "budget": {"max_trials": 1, "max_steps": 100_000}, "parallelism": 1}  # fmt: skip
    search = client.submit(spec)
    deadline = time.monotonic() + 60
    while not [t for t in search.trials(frame=False) if t["status"] == "running" and t["steps"] >= 5]:
        assert time.monotonic() < deadline, "no running trial"
        time.sleep(0.2)
    trial = search.trials(frame=False)[0]["id"]

    res = _quanta(server, "fork", str(trial), "--set", "lr=0.001", "--steps", "20")
    assert res.exit_code == 0, res.output
    assert f"forked from trial {trial} at step" in res.stdout and "(lr=0.001)" in res.stdout
    out = search.fork(trial, {"lr": 0.002}, steps=10)  # the SDK, waiting until it is carried out
    assert out["status"] == "done" and out["parent_id"] == trial and out["fork_step"] >= 5
    lineage = search.lineage()
    children = sorted((t for t in lineage["trials"] if t["parent_id"] == trial), key=lambda t: t["id"])
    assert [c["params"]["lr"] for c in children] == [0.001, 0.002] and lineage["mutable"] == ["lr"]
    assert [c["changes"][0]["values"] for c in children] == [{"lr": 0.001}, {"lr": 0.002}]
    assert client.trial(out["child_id"])["parent_id"] == trial

    for args, says in (
        (("--set", "lr=fast"), "not a number"),
        (("--set", "momentum=0.5"), "set.momentum"),
        (("--steps", "0"), "--steps"),
    ):
        res = _quanta(server, "fork", str(trial), *args)
        assert res.exit_code == 2 and says in res.output, res.output
    res = _quanta(server, "fork", "999999")
    assert res.exit_code == 2 and "404" in res.output, res.output
    search.stop()
    assert search.wait(timeout=60, poll_s=0.3).status == "stopped"


def _quanta_without_token(server):
    from typer.testing import CliRunner

    from quanta.cli import app as cli

    return CliRunner().invoke(cli, ["status", "--url", server.url], env={"QUANTA_TOKEN": ""})


# ---- notebook-friendly SDK -----------------------------------------------------------------------


def test_wait_shows_progress_trials_is_a_dataframe_and_plot_draws_best_so_far(client, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    search = client.submit({**UNREACHABLE, "name": "notebook"})
    search.wait(timeout=120, poll_s=0.3, progress="terminal")  # rich, as in a terminal
    err = capsys.readouterr().err
    assert f"search {search.id} notebook" in err and "2/2" in err, err
    search.wait(timeout=5, progress="notebook")  # tqdm.auto (its text form outside Jupyter)
    err = capsys.readouterr().err
    assert f"search {search.id} notebook" in err and "2/2" in err and "completed" in err, err
    search.wait(timeout=5)  # automatic: output is not a terminal here, so no bar
    assert capsys.readouterr().err == ""

    frame = search.trials()
    dicts = search.trials(frame=False)
    assert isinstance(frame, pd.DataFrame) and len(frame) == len(dicts) == 2
    assert list(frame["id"]) == [t["id"] for t in dicts]
    assert list(frame["params.lr"]) == [t["params"]["lr"] for t in dicts]  # params flattened to columns
    assert {"status", "metric", "best_metric", "steps", "device_seconds"} <= set(frame.columns)

    ax = search.plot()
    x, y = ax.get_lines()[0].get_data()
    points = search.best_curve()
    assert points and list(x) == [p[0] for p in points] and list(y) == [p[1] for p in points]
    assert ax.get_lines()[1].get_ydata()[0] == 2.0  # the target line
    assert "accuracy" in ax.get_ylabel()
