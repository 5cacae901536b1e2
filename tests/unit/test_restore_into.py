"""Loading a checkpoint into a trial's tracked objects (`quanta.sdk.tracked.restore_into` on a file read
`mapped`): the objects end with the saved values, an optimizer that holds state keeps its own tensors
(copied into, not replaced), and nothing the objects hold stays backed by the file: once the payload is
dropped, the file is no longer mapped in the process."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch

from quanta.sdk import checkpoint as ckpt
from quanta.sdk.tracked import check_fits, restore_into

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")


def mapped(path: Path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


def model_and_adam(seed: int, stepped: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    if stepped:  # Adam holds state (step, exp_avg, exp_avg_sq) from here on
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    return model, opt


class Counter:
    """A tracked object that is neither a module nor an optimizer, with a tensor in its state."""

    def __init__(self) -> None:
        self.seen = torch.zeros(3)

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen, "pairs": [(1, torch.ones(2))]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = state["seen"]
        self.pairs = state["pairs"]


def saved(tmp_path: Path) -> tuple[Path, torch.nn.Module, torch.optim.Optimizer, Counter]:
    model, opt = model_and_adam(0, stepped=True)
    counter = Counter()
    counter.seen += 7
    path = tmp_path / "state.pt"
    payload = {
        "step": 3,
        "rng": ckpt.rng_state(),
        "state": {"model": model.state_dict(), "opt": opt.state_dict(), "counter": counter.state_dict()},
    }
    ckpt.save_staged(payload, path)
    return path, model, opt, counter


def assert_same(
    model: torch.nn.Module, opt: torch.optim.Optimizer, want_model: torch.nn.Module, want_opt: torch.optim.Optimizer
) -> None:
    for (name, a), (_n, b) in zip(model.state_dict().items(), want_model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    mine, theirs = opt.state_dict(), want_opt.state_dict()
    assert mine["param_groups"] == theirs["param_groups"]
    for key, state in theirs["state"].items():
        for name, value in state.items():
            assert torch.equal(mine["state"][key][name], value), (key, name)


def restore(tracked: dict[str, Any], path: Path) -> None:
    payload = ckpt.load(path, mapped=True)
    check_fits(tracked, payload)
    assert mapped(path)  # read as a view of the file's pages
    for name, obj in tracked.items():
        restore_into(obj, payload["state"][name], torch.device("cpu"))
    del payload
    gc.collect()


def test_an_optimizer_holding_state_is_copied_into_and_the_file_is_let_go(tmp_path: Path):
    path, want_model, want_opt, _ = saved(tmp_path)
    model, opt = model_and_adam(1, stepped=True)
    own = {(key, name): value for key, state in opt.state_dict()["state"].items() for name, value in state.items()}
    counter = Counter()
    restore({"model": model, "opt": opt, "counter": counter}, path)
    assert_same(model, opt, want_model, want_opt)
    after = opt.state_dict()["state"]
    assert all(after[key][name] is value for (key, name), value in own.items())  # its own tensors, copied into
    assert torch.equal(counter.seen, torch.full((3,), 7.0)) and torch.equal(counter.pairs[0][1], torch.ones(2))
    assert isinstance(counter.pairs[0], tuple)
    assert not mapped(path)


def test_a_fresh_optimizer_gets_copies_and_the_file_is_let_go(tmp_path: Path):
    path, want_model, want_opt, _ = saved(tmp_path)
    model, opt = model_and_adam(2, stepped=False)  # a restart: no state yet
    restore({"model": model, "opt": opt}, path)
    assert_same(model, opt, want_model, want_opt)
    assert not mapped(path)
    # It trains on as the saved pair does from the same point.
    x = torch.randn(4, 8)
    for m, o in ((model, opt), (want_model, want_opt)):
        o.zero_grad()
        m(x).sum().backward()
        o.step()
    assert_same(model, opt, want_model, want_opt)
