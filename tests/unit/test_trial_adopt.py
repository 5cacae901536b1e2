"""`Trial`'s adoption of a staged state (a population's exploit in place): the adopting trial computes
exactly what a new process of it restored from the same file computes (bit for bit), a state that does
not fit is refused with nothing changed, and an adopted state is never written as the trial's checkpoint
before it runs again; a committing adoption makes the staged file its checkpoint itself before it runs on
(or, when it cannot, ends without writing one).

Each trial runs `tests.trainables:mutable_sgd` on a thread, connected to this test through a pipe: the
test plays the runtime's side of the trial protocol (`quanta.executor.runtime.child`)."""

from __future__ import annotations

import os
import shutil
import threading
from multiprocessing import Pipe
from pathlib import Path
from typing import Any

import pytest

from quanta.devices import cpu_devices
from quanta.sdk.trial import Trial, TrialReleased, TrialStopped
from tests.trainables import mutable_sgd

STEPS = 30


@pytest.fixture(autouse=True)
def keep_affinity():
    """A resumed trial pins its process to its device's cores: the test process gets its own back."""
    cores = os.sched_getaffinity(0)
    yield
    os.sched_setaffinity(0, cores)


class Harness:
    """One trial on a thread; `conn` is the runtime's end of its connection."""

    def __init__(self, path: Path, config: dict[str, Any], *, resume: bool = False, until: int | None = None):
        self.conn, child = Pipe()
        self.devices = cpu_devices(1)[:1]
        self.attempts = iter(range(1, 100))
        self.trial = Trial(
            1,
            dict(config),
            STEPS,
            self.devices,
            conn=child,
            checkpoint_path=str(path),
            resume=resume,
            until=until,
            mutable=("lr",),
            claim_attempt=lambda: next(self.attempts),
        )
        self.reports: list[tuple[int, dict[str, float], int]] = []  # (step, metrics, attempt)
        self.outcome: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            mutable_sgd(self.trial.config, self.trial)
            self.trial.finish()
            self.outcome = "completed"
        except TrialReleased:
            self.outcome = "released"
        except TrialStopped:
            self.outcome = "stopped"

    def wait(self, kind: str) -> dict[str, Any]:
        while True:
            assert self.conn.poll(30), f"no {kind!r} from the trial"
            got, msg = self.conn.recv()
            if got == "report":
                self.reports.append((msg["step"], msg["metrics"], msg["attempt"]))
            if got == kind:
                return msg

    def send(self, kind: str, **msg: Any) -> None:
        self.conn.send((kind, msg))

    def resume(self) -> None:
        self.send("resume", devices=self.devices, sent=None, until=None)

    def finish(self) -> None:
        """Wait for the trainable to end, then read what it sent until then."""
        self.thread.join(30)
        assert not self.thread.is_alive(), "the trial did not end"
        while self.conn.poll(0):
            got, msg = self.conn.recv()
            if got == "report":
                self.reports.append((msg["step"], msg["metrics"], msg["attempt"]))


def staged_state(tmp_path: Path, lr: float, at: int) -> Path:
    """A source trial's state at step `at` (with learning rate `lr`), staged as an exploit stages it."""
    src = Harness(tmp_path / "source.pt", {"lr": lr, "momentum": 0.9}, until=at)
    src.wait("parked")
    stage = tmp_path / "target.pt.exploit"
    src.send("fork", into=2, path=str(stage), staged=True)
    forked = src.wait("forked")
    assert forked["error"] is None and forked["step"] == at + 1
    src.send("stop", reason="done")
    src.finish()
    return stage


def test_an_adopted_state_computes_exactly_as_a_new_process_restored_from_it(tmp_path: Path):
    stage = staged_state(tmp_path, lr=0.05, at=12)
    # In place: a trial that computed with its own rate until step 7 adopts the state with a new rate.
    target = Harness(tmp_path / "target.pt", {"lr": 0.01, "momentum": 0.9}, until=6)
    target.wait("parked")
    own = len(target.reports)
    target.send("adopt", path=str(stage), values={"lr": 0.03})
    adopted = target.wait("adopted")
    assert adopted["error"] is None and adopted["step"] == 13
    target.resume()
    target.finish()
    assert target.outcome == "completed"
    in_place = target.reports[own:]
    assert [s for s, _m, _a in in_place] == list(range(13, STEPS))
    assert {a for _s, _m, a in in_place} == {1}  # a new attempt: the steps it ran are told apart
    # Restarted: a new process of the trial with the new rate, from the same file as its checkpoint.
    ckpt = tmp_path / "restart.pt"
    shutil.copyfile(stage, ckpt)
    restarted = Harness(ckpt, {"lr": 0.03, "momentum": 0.9}, resume=True)
    restarted.finish()
    assert restarted.outcome == "completed"
    assert [(s, m) for s, m, _a in in_place] == [(s, m) for s, m, _a in restarted.reports]  # bit for bit
    assert all(m["lr"] == pytest.approx(0.03) and m["config_lr"] == 0.03 for _s, m, _a in in_place)


def test_a_state_that_does_not_fit_is_refused_and_the_trial_goes_on_with_its_own(tmp_path: Path):
    target = Harness(tmp_path / "target.pt", {"lr": 0.01}, until=4)
    target.wait("parked")
    bad = tmp_path / "bad.exploit"
    bad.write_bytes(b"not a checkpoint")
    target.send("adopt", path=str(bad), values={"lr": 0.5})
    assert "cannot adopt" in target.wait("adopted")["error"]
    target.resume()
    target.finish()
    after = [m for s, m, _a in target.reports if s > 5]
    assert after and all(m["config_lr"] == 0.01 for m in after)  # nothing of it changed


def test_an_adopted_state_is_not_written_as_the_checkpoint_and_a_release_ends_without_one(tmp_path: Path):
    stage = staged_state(tmp_path, lr=0.05, at=8)
    ckpt = tmp_path / "target.pt"
    target = Harness(ckpt, {"lr": 0.01}, until=3)
    target.wait("parked")
    target.send("checkpoint")
    target.wait("checkpointed")
    own = ckpt.read_bytes()
    target.send("adopt", path=str(stage), values={"lr": 0.02})
    assert target.wait("adopted")["error"] is None
    target.send("checkpoint")  # the staged file becomes its checkpoint, or the process is discarded
    target.send("release")
    target.finish()
    assert target.outcome == "released" and ckpt.read_bytes() == own


def test_a_committing_adoption_makes_the_staged_file_the_checkpoint_before_it_runs_on(tmp_path: Path):
    stage = staged_state(tmp_path, lr=0.05, at=8)
    staged = stage.read_bytes()
    ckpt = tmp_path / "target.pt"
    target = Harness(ckpt, {"lr": 0.01}, until=3)
    target.wait("parked")
    target.send("checkpoint")
    target.wait("checkpointed")
    # The resume is sent right behind the adoption, as the controller sends its `Run`.
    target.send("adopt", path=str(stage), values={"lr": 0.02}, commit=True)
    target.resume()
    adopted = target.wait("adopted")
    assert adopted["error"] is None and adopted["committed"] is True and adopted["step"] == 9
    # Renamed in this process, before any step under the adopted state: its checkpoint is the staged file.
    assert not stage.exists() and ckpt.read_bytes() == staged
    target.send("checkpoint")  # from here on its checkpoints are of the adopted state, written as usual
    written = target.wait("checkpointed")
    assert written["step"] >= 9 and ckpt.read_bytes() != staged
    target.finish()
    assert target.outcome == "completed"
    after = [(s, m) for s, m, _a in target.reports if s >= 9]
    assert [s for s, _m in after] == list(range(9, STEPS)) and all(m["config_lr"] == 0.02 for _s, m in after)


def test_a_committing_adoption_whose_rename_fails_ends_without_a_checkpoint(tmp_path: Path):
    stage = staged_state(tmp_path, lr=0.05, at=8)
    ckpt = tmp_path / "target.pt"
    (ckpt / "in-the-way").mkdir(parents=True)  # a folder where its checkpoint goes: no rename can replace it
    target = Harness(ckpt, {"lr": 0.01}, until=3)
    target.wait("parked")
    target.send("adopt", path=str(stage), values={"lr": 0.02}, commit=True)
    adopted = target.wait("adopted")
    assert "cannot make the adopted state its checkpoint" in adopted["error"]
    target.finish()
    assert target.outcome == "released" and stage.exists() and ckpt.is_dir()  # staged state left for the controller
