"""The Trial calls for training loops Quanta does not own (`enter_loop`, `advance_to`, `boundary`,
`budget_spent`, `restored_step`): counting, refusals, and a restore through `track()`. No processes."""

from __future__ import annotations

import pytest
import torch

from quanta.devices import cpu_devices
from quanta.sdk import Trial


def test_steps_are_counted_by_the_loop_and_reports_carry_them():
    trial = Trial.standalone(max_steps=5, metric="acc")
    assert trial.metric == "acc" and not trial.controlled and trial.restored_step is None
    trial.enter_loop(0)
    trial.boundary(1)
    trial.advance_to(3)
    trial.report(acc=0.5)
    assert trial.step == 3 and trial.history == [(3, {"acc": 0.5})] and not trial.budget_spent
    trial.boundary()  # the same step again: nothing to count
    trial.boundary(5)
    assert trial.budget_spent


def test_a_step_that_goes_back_is_refused():
    trial = Trial.standalone()
    trial.advance_to(4)
    with pytest.raises(ValueError, match="already at step 4"):
        trial.boundary(3)


def test_restored_step_is_the_checkpoints(tmp_path):
    path = str(tmp_path / "ckpt.pt")
    model = torch.nn.Linear(2, 1)
    first = Trial(1, {}, 100, cpu_devices(1)[:1], checkpoint_path=path)
    first.track(model=model)
    first.boundary(7)
    first.checkpoint()
    again = Trial(1, {}, 100, cpu_devices(1)[:1], checkpoint_path=path, resume=True)
    copy = torch.nn.Linear(2, 1)
    again.track(model=copy)
    assert again.restored_step == 7 and again.step == 7
    assert torch.equal(copy.weight, model.weight)
    fresh = Trial(2, {}, 100, cpu_devices(1)[:1], checkpoint_path=str(tmp_path / "none.pt"), resume=True)
    fresh.track(model=torch.nn.Linear(2, 1))
    assert fresh.restored_step is None and fresh.step == 0


def _sent(conn) -> list[tuple[str, dict]]:
    out = []
    while conn.poll(0):
        out.append(conn.recv())
    return out


def test_a_first_process_ignores_files_another_search_left_at_its_paths(tmp_path):
    """Two databases' searches in one working directory share paths (`search-1/checkpoints/trial-1.pt`):
    a trial's first process (resume=False) must not replay the other's spooled reports nor restore its
    checkpoint; a later process of the same trial (resume=True) replays its own spool."""
    import json
    from multiprocessing import Pipe

    path = tmp_path / "trial-1.pt"
    stale = Trial(1, {}, 100, cpu_devices(1)[:1], checkpoint_path=str(path))
    stale.track(model=torch.nn.Linear(2, 1))
    stale.boundary(9)
    stale.checkpoint()
    spooled = {"step": 9, "metrics": {"acc": 0.99}, "at": 1.0}
    (tmp_path / "trial-1.pt.reports.jsonl").write_text(json.dumps(spooled) + "\n")

    ours, theirs = Pipe()
    first = Trial(1, {}, 100, cpu_devices(1)[:1], conn=theirs, checkpoint_path=str(path), resume=False)
    first.track(model=torch.nn.Linear(2, 1))
    assert first.restored_step is None and first.step == 0
    first.report(acc=0.1)
    reports = [p for kind, p in _sent(ours) if kind == "report"]
    assert [(r["step"], r["metrics"], r.get("replay", False)) for r in reports] == [(0, {"acc": 0.1}, False)]
    lines = (tmp_path / "trial-1.pt.reports.jsonl").read_text().splitlines()
    assert [json.loads(x)["metrics"] for x in lines] == [{"acc": 0.1}]  # the stale line is gone

    later = Trial(1, {}, 100, cpu_devices(1)[:1], conn=theirs, checkpoint_path=str(path), resume=True)
    later.report(acc=0.2)
    reports = [p for kind, p in _sent(ours) if kind == "report"]
    assert [(r["metrics"], r.get("replay", False)) for r in reports] == [({"acc": 0.1}, True), ({"acc": 0.2}, False)]
