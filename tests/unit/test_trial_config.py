"""The trial contract's config changes, in one process over a real pipe (the runtime's end of the trial's
connection): a change at a boundary updates `trial.config` in place, brings tracked optimizers and LR
schedulers along (`lr`, `momentum`, `weight_decay`), calls the hooks and is answered with its step; a
restore under other mutable values applies the difference; the state taken for a fork is the boundary's,
and taking it changes nothing; a trainable that does nothing special still works."""

from __future__ import annotations

from multiprocessing import Pipe

import pytest
import torch

from quanta.devices import cpu_devices
from quanta.sdk import Trial
from quanta.sdk import checkpoint as ckpt


def _trial(config: dict, mutable: tuple[str, ...], **kw) -> tuple[Trial, object]:
    ours, theirs = Pipe()
    trial = Trial(1, config, 100, cpu_devices(1)[:1], conn=theirs, profile_every_s=1e9, mutable=mutable, **kw)
    return trial, ours


def _answers(conn, kind: str) -> list[dict]:
    out = []
    while conn.poll():
        k, msg = conn.recv()
        if k == kind:
            out.append(msg)
    return out


def _sgd(lr: float = 0.1, momentum: float = 0.9, weight_decay: float = 0.0) -> torch.optim.SGD:
    model = torch.nn.Linear(3, 1)
    return torch.optim.SGD(
        [{"params": [model.weight]}, {"params": [model.bias], "lr": lr * 2}],
        lr=lr,
        momentum=momentum,
        weight_decay=weight_decay,
    )


def test_a_change_at_a_boundary_reaches_config_optimizer_scheduler_and_hooks():
    config = {"lr": 0.1, "momentum": 0.9, "opt": {"dropout": 0.2}, "layers": 3}
    trial, conn = _trial(config, ("lr", "momentum", "opt.dropout"))
    opt = _sgd()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    heard: list[dict] = []
    trial.on_config_change(heard.append)
    trial.track(optimizer=opt, scheduler=sched)
    seen = []
    for step in trial.steps(4):
        if step == 1:
            conn.send(("configure", {"values": {"lr": 0.01, "momentum": 0.5, "opt.dropout": 0.3}}))
        seen.append((step, [g["lr"] for g in opt.param_groups], opt.param_groups[0]["momentum"]))
        opt.step()
        sched.step()  # halves the rate at every step
    assert config is trial.config and config == {"lr": 0.01, "momentum": 0.5, "opt": {"dropout": 0.3}, "layers": 3}
    assert heard == [{"lr": 0.01, "momentum": 0.5, "opt.dropout": 0.3}]
    assert _answers(conn, "configured")[0]["step"] == 2  # taken at the boundary before step 2
    # before: the schedule's rates; from step 2: a tenth of them (the schedule keeps its shape), both groups
    assert seen[:2] == [(0, [0.1, 0.2], 0.9), (1, [0.05, 0.1], 0.9)]
    assert seen[2][0] == 2 and seen[2][1] == pytest.approx([0.0025, 0.005]) and seen[2][2] == 0.5
    assert sched.base_lrs == pytest.approx([0.01, 0.02])


def test_an_unchanged_value_and_a_key_the_optimizer_lacks_change_nothing():
    trial, conn = _trial({"lr": 0.1, "momentum": 0.9}, ("lr", "momentum"))
    model = torch.nn.Linear(3, 1)
    adam = torch.optim.Adam(model.parameters(), lr=0.1)  # no `momentum` key
    heard: list[dict] = []
    trial.on_config_change(heard.append)
    trial.track(optimizer=adam)
    conn.send(("configure", {"values": {"lr": 0.1, "momentum": 0.8}}))
    for _ in trial.steps(1):
        pass
    assert heard == [{"momentum": 0.8}] and "momentum" not in adam.param_groups[0]
    assert adam.param_groups[0]["lr"] == 0.1
    assert _answers(conn, "configured")[0]["values"] == {"momentum": 0.8}


def test_a_restore_under_other_values_applies_the_difference_and_the_same_values_nothing(tmp_path):
    path = str(tmp_path / "ckpt.pt")
    first, _ = _trial({"lr": 0.1, "momentum": 0.9, "layers": 2}, ("lr", "momentum"), checkpoint_path=path)
    opt = _sgd()
    first.track(optimizer=opt)
    first.boundary(5)
    first.checkpoint()
    assert ckpt.load(path)["config"] == {"lr": 0.1, "momentum": 0.9, "layers": 2}

    # a fork's first process: the optimizer it restores held the parent's values
    forked, _ = _trial({"lr": 0.3, "momentum": 0.9, "layers": 4}, ("lr", "momentum"), checkpoint_path=path, resume=True)
    heard: list[dict] = []
    forked.on_config_change(heard.append)
    mine = _sgd(lr=0.3)
    forked.track(optimizer=mine)
    assert forked.restored_step == 5 and heard == [{"lr": 0.3}]  # `layers` is not mutable: not a change
    assert [g["lr"] for g in mine.param_groups] == pytest.approx([0.3, 0.6])

    same, _ = _trial({"lr": 0.1, "momentum": 0.9, "layers": 2}, ("lr", "momentum"), checkpoint_path=path, resume=True)
    same.on_config_change(heard.append)
    again = _sgd(lr=0.5)  # built otherwise: the state restored is the checkpoint's, untouched
    same.track(optimizer=again)
    assert len(heard) == 1 and [g["lr"] for g in again.param_groups] == [0.1, 0.2]


def test_the_state_taken_for_a_fork_is_the_boundarys_and_the_trial_goes_on_untouched(tmp_path):
    trial, conn = _trial({"lr": 0.1}, ("lr",), checkpoint_path=str(tmp_path / "own.pt"))
    model = torch.nn.Linear(3, 1)
    trial.track(model=model)
    target = tmp_path / "search-1" / "checkpoints" / "trial-9.pt"
    for step in trial.steps(6):
        if step == 2:
            conn.send(("fork", {"into": 9, "path": str(target)}))
        if step == 3:
            taken = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            model.weight += 1.0
    (answer,) = _answers(conn, "forked")
    assert (answer["into"], answer["step"], answer["error"]) == (9, 3, None)
    state = ckpt.load(target)
    assert state["step"] == 3 and state["config"] == {"lr": 0.1}
    assert all(torch.equal(state["state"]["model"][k], v) for k, v in taken.items())
    assert not (tmp_path / "own.pt").exists()  # its own checkpoint was not written for it
    assert float(model.weight.detach()[0, 0]) == pytest.approx(float(taken["weight"][0, 0]) + 3)  # it went on

    # a write that fails is said, and the trial goes on
    blocked = tmp_path / "blocked.pt"
    blocked.mkdir()
    conn.send(("fork", {"into": 10, "path": str(blocked)}))
    for _ in trial.steps(7):
        pass
    (failed,) = _answers(conn, "forked")
    assert failed["into"] == 10 and str(blocked) in failed["error"] and trial.step == 7


def test_a_trainable_that_does_nothing_special_still_works():
    trial, conn = _trial({"lr": 0.1}, ("lr",))
    conn.send(("configure", {"values": {"lr": 0.2}}))
    for _ in trial.steps(2):
        pass
    assert trial.config == {"lr": 0.2} and _answers(conn, "configured")[0]["values"] == {"lr": 0.2}
