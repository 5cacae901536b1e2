"""Checkpoints: loading one runs no code it carries (weights_only with an allowlist), the state trials
really save still loads, and a full disk leaves the previous checkpoint intact without failing the trial."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from quanta.devices import cpu_devices
from quanta.sdk import checkpoint as ckpt
from quanta.sdk.trial import Trial


class _Payload:
    """What an attacker who can write to the shared checkpoint folder would plant."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "trial-1.pt"
    torch.save({"step": 3, "state": {}, "rng": _Payload(marker)}, path)  # a valid torch file
    with pytest.raises(ckpt.CheckpointRefused, match="trial-1.pt"):
        ckpt.load(path)
    assert not marker.exists(), "loading the checkpoint ran its payload"


def test_what_trials_save_still_loads(tmp_path: Path) -> None:
    """A model, its Adam state (after a step: tensors and ints), every RNG state (numpy's holds an array),
    the report history, and numpy arrays and scalars a trainable may keep in a state dict."""
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    extra = {"mean": np.arange(5, dtype=np.float32), "count": np.int64(7), "ratio": np.float64(0.25), "flag": True}
    payload = {
        "step": 12,
        "state": {"model": model.state_dict(), "optimizer": opt.state_dict(), "extra": extra},
        "rng": ckpt.rng_state(),
        "history": [(10, {"accuracy": 0.5, "loss": float("nan")})],
    }
    path = ckpt.save_atomic(payload, tmp_path / "ck" / "trial-2.pt")
    back = ckpt.load(path)
    assert back["step"] == 12
    assert torch.equal(back["state"]["model"]["weight"], model.state_dict()["weight"])
    opt2 = torch.optim.Adam(torch.nn.Linear(4, 2).parameters(), lr=0.01)
    opt2.load_state_dict(back["state"]["optimizer"])  # loads as a real optimizer state
    assert back["state"]["extra"]["count"] == 7 and back["state"]["extra"]["ratio"] == 0.25
    np.testing.assert_array_equal(back["state"]["extra"]["mean"], extra["mean"])
    ckpt.set_rng_state(back["rng"])
    assert back["history"][0][0] == 10
    assert [p.name for p in path.parent.iterdir()] == ["trial-2.pt"]  # no temporary file left


@contextlib.contextmanager
def _small_disk(where: Path, size_kb: int) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_disk_keeps_the_previous_checkpoint_and_the_trial_going(tmp_path: Path) -> None:
    with _small_disk(tmp_path / "disk", 512) as disk:
        path = disk / "trial-3.pt"
        trial = Trial(3, {}, 100, cpu_devices(1)[:1], checkpoint_path=str(path))
        model = torch.nn.Linear(32, 32)
        trial.track(model=model)
        steps = trial.steps()
        for _ in range(5):
            next(steps)
        assert trial.checkpoint() == str(path)
        filler = _fill(disk)
        for _ in range(5):
            next(steps)
        assert trial.checkpoint() is None  # failed: reported, not raised
        assert ckpt.load(path)["step"] == 4  # the previous checkpoint, intact
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "trial-3.pt"]  # no half-written file
        next(steps)  # the trial goes on
        filler.unlink()
        assert trial.checkpoint() == str(path)  # retried once there is room again
        assert ckpt.load(path)["step"] == trial.step
