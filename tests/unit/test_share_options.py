"""The share layer's knobs and users' weights as `quanta serve` / `quanta controller` options: checked
before anything starts, a bad value an exit 2 whose message names the option (and the user); weights
written to the users' rows only when every one is valid."""

from __future__ import annotations

import re
import sys
import time

import pytest
from typer.testing import CliRunner

from quanta.cli import app
from quanta.cli.share_options import ShareOptionError, apply_weights, parse_weights, share_knobs
from quanta.db.store import Store
from quanta.executor.policy.knobs import ShareKnobs


def test_knobs_default_to_the_share_layers_and_take_what_is_given():
    assert share_knobs(None, False, None) == ShareKnobs()
    assert share_knobs(60.0, True, 2.5) == ShareKnobs(window_s=60.0, favour_worst_rho=True, rho_cap=2.5)


@pytest.mark.parametrize(
    ("window_s", "rho_cap", "named"),
    [
        (0.0, None, "--share-window-s (share knob window_s)"),
        (-3.0, None, "--share-window-s (share knob window_s)"),
        (float("inf"), None, "--share-window-s (share knob window_s)"),
        (None, 0.5, "--rho-cap (share knob rho_cap)"),
        (None, float("nan"), "--rho-cap (share knob rho_cap)"),
    ],
)
def test_a_knob_out_of_range_is_refused_naming_the_option(window_s, rho_cap, named):
    with pytest.raises(ShareOptionError, match="^" + re.escape(named) + ": "):
        share_knobs(window_s, False, rho_cap)


@pytest.mark.parametrize("rho_bound", [0.5, float("nan"), float("inf")])
def test_a_rho_bound_below_one_or_not_finite_is_refused_naming_the_option(rho_bound):
    assert share_knobs(None, False, None, 1.5) == ShareKnobs(rho_bound=1.5)
    with pytest.raises(ShareOptionError, match="^" + re.escape("--rho-bound (share knob rho_bound)") + ": "):
        share_knobs(None, False, None, rho_bound)


def test_weights_parse_and_bad_ones_name_the_item():
    assert parse_weights(["ann=2", " bob = 0.5"]) == {"ann": 2.0, "bob": 0.5}
    assert parse_weights([]) == {}
    for item, message in [
        ("ann", "--weight 'ann': expected NAME=W"),
        ("=2", "--weight '=2': expected NAME=W"),
        ("ann=x", "--weight ann: weight 'x' is not a number"),
        ("ann=0", "--weight ann: weight must be > 0 and <= 1000, not 0"),
        ("ann=-1", "--weight ann: weight must be > 0"),
        ("ann=1001", "--weight ann: weight must be > 0 and <= 1000, not 1001"),
        ("ann=nan", "--weight ann: weight must be > 0"),
    ]:
        with pytest.raises(ShareOptionError) as exc:
            parse_weights(["bob=1", item])
        assert str(exc.value).startswith(message), (item, str(exc.value))


def test_weights_are_written_only_when_every_user_exists(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/q.db")
    store.add_user("ann", time.time())
    store.add_user("bob", time.time())
    with pytest.raises(ShareOptionError, match="no such user: carl, dora"):
        apply_weights(store, {"ann": 3.0, "dora": 2.0, "carl": 1.0})
    assert store.user("ann").weight == 1.0  # nothing written
    apply_weights(store, {"ann": 3.0, "bob": 0.25})
    assert store.user_weights()["ann"] == 3.0 and store.user_weights()["bob"] == 0.25


@pytest.fixture
def cli(monkeypatch):
    """Runs `quanta ...` in this process; `serve` drops the working directory from `sys.path`, so that
    is restored afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    return lambda args, env=None: CliRunner().invoke(app, args, env=env)


@pytest.mark.parametrize("command", ["serve", "controller"])
def test_commands_refuse_a_bad_knob_before_starting(cli, tmp_path, command):
    db = f"sqlite:///{tmp_path}/q.db"
    extra = ["--broker", "redis://127.0.0.1:1/0"] if command == "controller" else ["--devices", "cpu:1"]
    r = cli([command, "--db", db, *extra, "--rho-cap", "0.5"])
    assert (
        r.exit_code == 2
        and "error: --rho-cap (share knob rho_cap): Input should be greater than or equal to 1" in r.output
    )
    r = cli([command, "--db", db, *extra], env={"QUANTA_SHARE_WINDOW_S": "0"})
    assert r.exit_code == 2 and "--share-window-s (share knob window_s): Input should be greater than 0" in r.output
    r = cli([command, "--db", db, *extra], env={"QUANTA_SHARE_RHO_BOUND": "0.9"})
    assert (
        r.exit_code == 2
        and "--rho-bound (share knob rho_bound): Input should be greater than or equal to 1" in r.output
    )
    r = cli([command, "--db", db, *extra, "--weight", "ann=5000"])
    assert r.exit_code == 2 and "--weight ann: weight must be > 0 and <= 1000" in r.output
    assert not (tmp_path / "q.db").exists()  # refused before the database was opened


def test_serve_refuses_weights_of_unknown_users_and_writes_none(cli, tmp_path):
    db = f"sqlite:///{tmp_path}/q.db"
    Store(db).add_user("ann", time.time())
    workdir = tmp_path / "work"
    args = ["--devices", "cpu:1", "--workdir", str(workdir), "--weight", "ann=4", "--weight", "ghost=2"]
    r = cli(["serve", "--db", db, *args])
    assert r.exit_code == 2 and "--weight: no such user: ghost" in r.output, r.output
    assert Store(db).user("ann").weight == 1.0
    assert not (workdir / "DATABASE").exists()  # a refused server claims no workdir


def test_simulate_refuses_a_bad_rho_bound_and_one_without_users(cli, tmp_path):
    trace = tmp_path / "two_jobs.csv"  # a trace in the Tiresias format: no shared data needed
    trace.write_text("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,606,vgg19,164,30\n")
    base = ["simulate", "--trace", str(trace), "--gpus", "4"]
    r = cli([*base, "--users", "2", "--shares", "equal", "--rho-bound", "0.5"])
    assert r.exit_code == 2 and "--rho-bound (share knob rho_bound)" in r.output, r.output
    r = cli([*base, "--rho-bound", "1.5"])
    assert r.exit_code == 2 and "--rho-bound need --users N" in r.output, r.output
    r = cli([*base, "--users", "2", "--rho-bound", "1.5"])  # no --shares: no share layer to bound
    assert r.exit_code == 2 and "--rho-bound needs the share layer" in r.output, r.output
