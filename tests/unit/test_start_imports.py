"""What a cold start imports: the `quanta run` process and the trial processes forked from the template
import only what their start needs (measured in docs/benchmarks.md, "Start to the first mini-batch").
Each check runs in a fresh interpreter, where nothing was imported before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(code: str, modules: list[str]) -> dict[str, bool]:
    """Which of `modules` are in `sys.modules` after running `code` in a new interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {modules!r}}}))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_run_command_starts_without_torch_scipy_stats_or_scipy_optimize():
    """`quanta run`'s own process (the controller, the database, the spec) imports none of them before
    its first trial starts: torch is the template's, scipy.stats (hyperopt's ATPE) and scipy.optimize
    (curve fits) come when first used."""
    code = (
        "import quanta.cli, quanta.cli.run, quanta.spec, quanta.devices, quanta.db.lease, quanta.controller, "
        "quanta.db.store, quanta.db.summary, quanta.db.warm, quanta.executor.runtime.local, quanta.service, "
        "quanta.stored_search"
    )
    heavy = ["torch", "scipy.stats", "scipy.optimize"]
    assert loaded_after(code, heavy) == dict.fromkeys(heavy, False)


def test_hyperopts_atpe_is_imported_when_used():
    """hyperopt's ATPE module is registered unexecuted: its names resolve on first use, as imported."""
    code = (
        "import quanta.search.space, hyperopt, sys\n"
        "assert 'scipy.stats' not in sys.modules\n"
        "from hyperopt import atpe\n"
        "assert callable(atpe.ATPEOptimizer) and atpe.__name__ == 'hyperopt.atpe'"
    )
    assert loaded_after(code, ["scipy.stats"]) == {"scipy.stats": True}


def test_ashas_rung_check_judges_without_scipy_stats():
    """Its rank correlation is numpy's: importing scipy.stats at the first judgement stalled the
    controller 0.5-0.9 s a second into every search."""
    code = (
        "from quanta.executor.policy.asha.rung_check import spearman\n"
        "assert abs(spearman([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]) - 0.8) < 1e-9"
    )
    assert loaded_after(code, ["scipy.stats"]) == {"scipy.stats": False}


def test_a_trial_process_loads_no_knob_models():
    """The trial side of the runtime (what the template imports before it forks) needs neither the
    policies nor pydantic: a trial's launch carries plain numbers (`quanta.cadence`)."""
    modules = ["quanta.executor.policy", "pydantic"]
    assert loaded_after("import quanta.executor.runtime.child", modules) == dict.fromkeys(modules, False)


def test_the_knobs_defaults_are_the_launch_defaults():
    from quanta.executor.actions import TrialLaunch
    from quanta.executor.policy.knobs import MECHANISM

    launch = TrialLaunch(1, "m:f", {}, 10, "/tmp/c.pt")
    assert launch.checkpoint_every_quanta == MECHANISM.checkpoint_every_quanta == 10
    assert launch.checkpoint_every_s == MECHANISM.checkpoint_every_s == 60.0
