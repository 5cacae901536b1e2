"""GPU paths of the mechanism: run only where CUDA is present (skipped otherwise)."""

from __future__ import annotations

import time

import pytest

from quanta.devices import parse_devices
from quanta.executor.actions import Exited, Migrate, Parked, Reported, Resumed, Run, Suspend
from quanta.executor.runtime.local import LocalRuntime
from tests.integration.helpers import collect_until_exit, launches

pytestmark = pytest.mark.cuda


def test_park_frees_device_memory_and_resume_is_exact(tmp_path):
    import torch

    cfg = {"steps": 300, "report_every": 1, "hidden": 4096}
    rt = LocalRuntime(
        parse_devices("cuda:0"),
        launches(tmp_path, {1: ("tests.trainables:linear", cfg), 2: ("tests.trainables:linear", cfg)}),
    )
    try:
        rt.apply(1, [Run(1, ("cuda:0",))])
        ref = [e.metrics["loss"] for e in collect_until_exit(rt, {1}) if isinstance(e, Reported)]
        rt.apply(2, [Run(2, ("cuda:0",))])
        time.sleep(1.0)
        before = torch.cuda.mem_get_info(0)[0]
        rt.apply(3, [Suspend(2)])
        assert any(isinstance(e, Parked) for e in rt.poll(5))
        time.sleep(0.5)
        after = torch.cuda.mem_get_info(0)[0]
        assert after > before  # the parked trial's tensors left the device and its cache was released
        rt.apply(4, [Run(2, ("cuda:0",))])
        got = [e.metrics["loss"] for e in collect_until_exit(rt, {2}) if isinstance(e, Reported)]
        assert got == ref
    finally:
        rt.close()


@pytest.mark.skipif("not __import__('torch').cuda.device_count() > 1", reason="needs two CUDA devices")
def test_migration_between_gpus(tmp_path):
    cfg = {"steps": 10**6, "report_every": 100}
    rt = LocalRuntime(parse_devices("cuda:0,1"), launches(tmp_path, {1: ("tests.trainables:linear", cfg)}))
    try:
        rt.apply(1, [Run(1, ("cuda:0",))])
        time.sleep(1.0)
        rt.apply(2, [Migrate(1, ("cuda:1",))])
        resumed = [e for e in rt.poll(10) if isinstance(e, Resumed)]
        assert resumed and resumed[0].migrated and resumed[0].devices == ("cuda:1",)
        rt.apply(3, [Suspend(1)])
    finally:
        rt.close()
    assert not any(isinstance(e, Exited) and e.status == "failed" for e in rt.poll(0))


# ---- Lightning and Hugging Face trials on GPUs (app/integrations/) ----------------------------------------

INTEGRATIONS = {
    # name: (config, metric); the mixed-precision cases move a gradient scaler too
    "lightning": ({"accelerator": "cuda", "accumulate": 2, "eval_every": 4}, "accuracy"),
    "lightning-16-mixed": (
        {"accelerator": "cuda", "accumulate": 2, "eval_every": 4, "precision": "16-mixed"},
        "accuracy",
    ),
    "hf": ({"cuda": True, "accumulate": 2, "eval_every": 2}, "eval_accuracy"),
    "hf-fp16": ({"cuda": True, "accumulate": 2, "eval_every": 2, "fp16": True}, "eval_accuracy"),
}
STEPS = 8


def _integration_run(name, config, trial, tmp_path):
    from tests.integration.driver import hf_train, lightning_train

    if name.startswith("lightning"):
        return lightning_train(config, trial)
    return hf_train(config, trial, tmp_path / "hf")


def _driven(name, tmp_path, devices):
    """An uninterrupted run on the first device, then one parked often and resumed on the next of
    `devices` in turn (its state goes to host memory and back, or to the other GPU)."""
    from quanta.sdk import Trial
    from tests.integration.driver import Driver

    config, metric = INTEGRATIONS[name]
    reference = Trial(0, config, STEPS, devices[:1], metric=metric)
    _integration_run(name, config, reference, tmp_path)
    driver = Driver(devices)
    try:
        trial = driver.trial(config, STEPS, tmp_path / "ckpt.pt", metric)
        _integration_run(name, config, trial, tmp_path)
    finally:
        driver.close()
    assert len(driver.parks) >= 2
    return reference.history, driver


@pytest.mark.parametrize("name", sorted(INTEGRATIONS))
def test_integration_parked_in_host_memory_is_exact(name, tmp_path):
    from quanta.devices import cuda_devices

    reference, driver = _driven(name, tmp_path, cuda_devices([0]))
    assert driver.reports == reference  # the same GPU: bit for bit


@pytest.mark.skipif("not __import__('torch').cuda.device_count() > 1", reason="needs two CUDA devices")
@pytest.mark.parametrize("name", sorted(INTEGRATIONS))
def test_integration_moved_between_gpus(name, tmp_path):
    from quanta.devices import cuda_devices

    reference, driver = _driven(name, tmp_path, cuda_devices([0, 1]))
    assert driver.moves >= 1
    # Two GPUs of one model compute alike; of two models their kernels may round differently.
    assert [s for s, _ in driver.reports] == [s for s, _ in reference]
    for (_, got), (_, want) in zip(driver.reports, reference, strict=True):
        assert got == pytest.approx(want, rel=1e-4, abs=1e-4)
