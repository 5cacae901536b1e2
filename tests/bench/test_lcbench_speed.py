"""bench/lcbench_speed.py's `timed_parts`: each part of a simulated search's round is timed while the
block runs and the classes get their own methods back after (a stand-in surrogate, no ONNX)."""

from __future__ import annotations

import pytest

from bench.lcbench_speed import PARTS, timed_parts
from quanta.sim.search_bench import run_search
from tests.unit.test_sim_search import stand_in


def methods() -> dict[str, object]:
    """Each part's method as its class holds it now."""
    return {part: cls.__dict__[meth] for part, (cls, meth) in PARTS.items()}


def test_each_part_of_a_simulated_search_is_timed_and_the_methods_are_restored():
    before = methods()
    with timed_parts() as spent:
        res = run_search(stand_in(time_scale=0.1), policy="asha", algorithm="bohb", workers=2, hours=0.05, seed=2)
        inside = methods()
    assert res.started > 2 and res.reports > 0
    assert set(spent) == set(PARTS)
    # Every part ran in this search, so each took some CPU time; the surrogate is called from the
    # runtime's apply (a new trial's curve), so apply's time includes it.
    assert all(spent[part] > 0 for part in PARTS)
    assert spent["runtime.apply"] >= spent["surrogate"]
    assert all(inside[part] is not before[part] for part in PARTS)  # wrapped while timing
    assert methods() == before  # restored


def test_the_methods_are_restored_when_the_block_raises():
    before = methods()
    with pytest.raises(RuntimeError, match="boom"), timed_parts():
        raise RuntimeError("boom")
    assert methods() == before


def test_the_speed_script_starts_on_the_real_surrogate(yahpo, tmp_path):
    """A few simulated minutes of the default on one core, each part timed (its own process: the
    script pins itself to one core)."""
    import json

    from tests.bench.conftest import run_script

    out = tmp_path / "speed.json"
    args = ["--task", "3945", "--hours", "0.05", "--systems", "default", "--parts", "--json", str(out)]
    run_script("lcbench_speed", *args)
    row = json.loads(out.read_text())["systems"]["default"]
    assert row["started"] > 0 and row["cpu_s"] > 0 and set(row["parts_cpu_s"]) == set(PARTS)
