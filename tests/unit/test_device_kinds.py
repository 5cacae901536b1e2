"""Device kinds the scheduler sees (issue 14, Gavel): CPU devices carry $QUANTA_CPU_KIND, CUDA devices
their driver-reported name; binding still goes by cpu/cuda."""

from __future__ import annotations

import pytest

from quanta.devices import CPU_KIND_ENV, DeviceSpecError, parse_devices


def test_cpu_devices_are_kind_cpu_by_default(monkeypatch):
    monkeypatch.delenv(CPU_KIND_ENV, raising=False)
    devs = parse_devices("cpu:2")
    assert [d.placement_kind for d in devs] == ["cpu", "cpu"]
    assert all(d.kind == "cpu" for d in devs)


def test_cpu_kind_label_from_the_environment(monkeypatch):
    monkeypatch.setenv(CPU_KIND_ENV, "xeon-6248")
    devs = parse_devices("cpu:2")
    assert [d.placement_kind for d in devs] == ["xeon-6248", "xeon-6248"]
    assert all(d.kind == "cpu" and d.threads >= 1 for d in devs)  # binding is unchanged


@pytest.mark.parametrize("bad", ["x" * 65, "a/b", "gpu;rm"])
def test_a_bad_cpu_kind_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(CPU_KIND_ENV, bad)
    with pytest.raises(DeviceSpecError, match=CPU_KIND_ENV):
        parse_devices("cpu:1")


def test_the_local_runtime_reports_the_placement_kind(monkeypatch, tmp_path):
    from quanta.executor.runtime.local import LocalRuntime

    monkeypatch.setenv(CPU_KIND_ENV, "epyc")
    rt = LocalRuntime(parse_devices("cpu:2"), workdir=str(tmp_path))
    try:
        assert {v.kind for v in rt.devices()} == {"epyc"}
    finally:
        rt.close()


@pytest.mark.cuda
def test_cuda_devices_carry_their_name():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    devs = parse_devices("cuda:all")
    assert [d.placement_kind for d in devs] == [torch.cuda.get_device_name(d.index) for d in devs]
