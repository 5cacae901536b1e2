"""Devices a node offers to trials, and binding a process to one.

`parse_devices("cpu:2" | "cuda:0,1" | "cuda:all" | "auto")` lists them. A CPU "device" is a disjoint
share of this machine's cores: `cpu:N` splits the cores the process may use into N groups, and a trial
on `cpu:i` is pinned to group i and starts with that many torch threads. Two trials packed on one CPU
device therefore really share its cores (packing is measured honestly), and moving a trial between CPU
devices re-pins it without changing its thread count. CUDA devices map to `torch.device("cuda:i")`.

A ground module (it imports nothing from `quanta`): the CLI and the workers parse devices, the runtime
places trials on them, and the trial itself (`quanta.sdk.trial`) binds its process to them. Living here
rather than in `app/executor/runtime/` lets the sdk use it without importing the runtime, which
imports the sdk to run trials (no import runs back up: tests/unit/test_layers.py).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

# torch is imported lazily: the controller lists devices without paying for torch's import.


CPU_KIND_ENV = "QUANTA_CPU_KIND"  # the placement kind of this machine's CPU devices (default "cpu")
_KIND_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._- ")


@dataclass(frozen=True)
class Device:
    id: str  # "cpu:0", "cuda:1"
    kind: str  # "cpu" | "cuda": how a process binds to it
    index: int
    cores: tuple[int, ...] = ()  # CPU devices: the cores it owns
    memory_mb: float = 0.0
    # What policies compare rates by (Gavel's device type): a CUDA device's name as the driver reports
    # it ("NVIDIA A100-SXM4-40GB"), CPU devices' label from QUANTA_CPU_KIND; "" = `kind`.
    label: str = ""

    @property
    def threads(self) -> int:
        return max(1, len(self.cores)) if self.kind == "cpu" else 1

    @property
    def placement_kind(self) -> str:
        """The kind the scheduler sees (`DeviceView.kind`): devices of one placement kind are
        interchangeable, and a trial's measured rate on one stands for all of them."""
        return self.label or self.kind


def cpu_kind() -> str:
    """The placement kind of CPU devices: $QUANTA_CPU_KIND (e.g. "xeon-6248" on one pool of machines,
    "epyc-7763" on another), default "cpu". Raises DeviceSpecError naming the variable when it is not
    1-64 letters, digits, spaces or ._-"""
    raw = os.environ.get(CPU_KIND_ENV, "").strip()
    if not raw:
        return "cpu"
    if len(raw) > 64 or not set(raw) <= _KIND_CHARS:
        raise DeviceSpecError(f"{CPU_KIND_ENV}={raw[:80]!r}: expected 1-64 letters, digits, spaces, '.', '_' or '-'")
    return raw


class DeviceSpecError(ValueError):
    pass


def _cores() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _host_memory_mb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError):
        return 0.0


def cpu_devices(n: int) -> list[Device]:
    if n < 1:
        raise DeviceSpecError("cpu:N needs N >= 1")
    cores = _cores()
    groups: list[list[int]] = [[] for _ in range(n)]
    if n <= len(cores):
        per = len(cores) // n
        for i in range(n):
            groups[i] = cores[i * per : (i + 1) * per]
    else:  # more devices than cores: devices share cores round-robin
        for i in range(n):
            groups[i] = [cores[i % len(cores)]]
    mem = _host_memory_mb() / n
    label = cpu_kind()
    return [Device(f"cpu:{i}", "cpu", i, tuple(g), mem, label) for i, g in enumerate(groups)]


def oversubscription(devices: list[Device]) -> str | None:
    """A warning when the CPU devices outnumber the cores this process may use (`cpu:9` on 2 cores), else
    None. Accepted, not refused: such devices share cores round-robin, which suits trials that mostly
    wait (on I/O, a remote service, a sleep); trials that compute slow each other down instead, each
    getting a fraction of a core, and their measured rates say so."""
    cpus = [d for d in devices if d.kind == "cpu"]
    cores = len(_cores())
    if len(cpus) <= cores:
        return None
    return (
        f"{len(cpus)} CPU devices on {cores} core{'s' if cores != 1 else ''}: devices share cores, so trials "
        f"that compute slow each other down (use cpu:{cores} or fewer unless your trials mostly wait)"
    )


def cuda_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def cuda_devices(indices: list[int]) -> list[Device]:
    import torch

    count = cuda_count()
    out = []
    for i in indices:
        if i >= count:
            raise DeviceSpecError(f"cuda:{i} does not exist ({count} CUDA devices present)")
        props = torch.cuda.get_device_properties(i)
        out.append(Device(f"cuda:{i}", "cuda", i, (), props.total_memory / 2**20, str(props.name) or "cuda"))
    return out


def parse_devices(spec: str) -> list[Device]:
    """`cpu:N`, `cuda:0,1`, `cuda:all` or `auto` (all CUDA devices, else one CPU device per core)."""
    s = spec.strip().lower()
    if s == "auto":
        n = cuda_count()
        return cuda_devices(list(range(n))) if n else cpu_devices(len(_cores()))
    kind, _, rest = s.partition(":")
    if kind == "cpu":
        if not rest.isdigit():
            raise DeviceSpecError(f"devices '{spec}': expected cpu:N with N a positive integer")
        return cpu_devices(int(rest))
    if kind == "cuda":
        if rest == "all":
            n = cuda_count()
            if not n:
                raise DeviceSpecError("devices 'cuda:all': no CUDA device present")
            return cuda_devices(list(range(n)))
        try:
            idx = [int(x) for x in rest.split(",") if x.strip()]
        except ValueError:
            raise DeviceSpecError(f"devices '{spec}': expected cuda:0,1,...") from None
        if not idx:
            raise DeviceSpecError(f"devices '{spec}': no CUDA index given")
        return cuda_devices(idx)
    raise DeviceSpecError(f"devices '{spec}': expected cpu:N, cuda:I[,J...], cuda:all or auto")


def pin_process(devices: list[Device]) -> None:
    """Pin this process (all its threads) to the devices' cores; for CUDA devices, select the first as
    the current CUDA device. Leaves torch's thread count alone: a trial moved to another device keeps
    computing with the thread count it started with (see `bind_process`)."""
    first = devices[0]
    if first.kind == "cpu":
        cores = sorted({c for d in devices for c in d.cores})
        if cores and hasattr(os, "sched_setaffinity"):
            # sched_setaffinity(0) pins only the calling thread: pin every thread of the process so
            # torch's worker threads follow the trial to its new device.
            for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), cores)
    else:
        import torch

        torch.cuda.set_device(first.index)


def repin_process(pid: int, devices: list[Device]) -> bool:
    """Pin every thread of process `pid` (a trial process of this user) to the cores of CPU `devices`
    now, from outside it and whatever it is doing: a move between CPU devices needs nothing else (the
    tensors stay in the same memory), so the runtime makes it at once instead of waiting for the trial's
    next mini-batch boundary. Threads the process starts afterwards inherit the new cores from the
    thread that starts them; the trial re-pins all of its threads itself at its next boundary too
    (`pin_process`). Returns False, having changed nothing it could tell, when a device is not a CPU
    device or owns no cores, the platform cannot pin, or the process is gone or not ours."""
    if not devices or any(d.kind != "cpu" for d in devices) or not hasattr(os, "sched_setaffinity"):
        return False
    cores = sorted({c for d in devices for c in d.cores})
    if not cores:
        return False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    pinned = 0
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)
            pinned += 1
    return pinned > 0


def default_threads(devices: list[Device]) -> int:
    """The torch thread count a trial starts with on `devices`: one per core of its CPU devices."""
    return max(1, len({c for d in devices for c in d.cores}))


def bind_process(devices: list[Device]) -> None:
    """Bind a trial process to the devices it starts on: `pin_process`, and on CPU devices size torch's
    thread pool to one thread per core (`default_threads`).

    Called once, when the trial process starts, before the trainable runs: a trainable that calls
    `torch.set_num_threads` itself overrides this, and its choice stands for the rest of the trial.
    Later moves (resume after a park, migration to a device with another core count) call only
    `pin_process`, so a trial computes with the same thread count in every quantum; only its cores
    change."""
    pin_process(devices)
    if devices[0].kind == "cpu":
        import torch

        torch.set_num_threads(default_threads(devices))


def torch_device(device: Device):  # -> torch.device
    import torch

    return torch.device("cpu") if device.kind == "cpu" else torch.device("cuda", device.index)
