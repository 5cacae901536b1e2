"""LCBench peers that run in a Python environment of their own: MOBSTER, Hyper-Tune and DyHPO (Syne Tune
0.14.2, the last release with them) and DEHB (`dehb` 0.1.2). Both pin numpy < 1.27, the main environment
has numpy 2 and Syne Tune 0.16, so `bench/peer_env.sh` (`make peers-old`) builds a second virtual
environment with the exact versions in `bench/peer_requirements.txt`, and `bench/lcbench.py` runs these
systems in a subprocess of its Python, on the same surrogate (`quanta.sim.lcbench` from this tree) and the
same exact clock, reading back the run as JSON.

Contract:
- `PEER_SYSTEMS`: system name in `bench/lcbench.py` -> what runs it (`syne_<method>_exact`:
  `syne_lcbench.run_syne_method(method, clock="exact")`; `dehb_exact`: `dehb_lcbench.run_dehb`).
- `peer_python()`: the environment's interpreter: `$QUANTA_PEER_VENV/bin/python`, else
  `.venv-peers/bin/python` at the project root; `missing_reason()` says why it cannot run (None if it can).
- `run_peer(system, task, seed, workers, hours, targets, stop_at, data) -> PeerRun`: one run in that
  environment; a failure raises `RuntimeError` with the subprocess's own error text.
- `python bench/peer_env.py --system S --task T --seed N --workers W --hours H --targets JSON
  [--stop-at X] [--data DIR] --out FILE` (inside the environment): runs one and writes the PeerRun as
  JSON to FILE (written whole or not at all), plus the versions that ran it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.reach import PeerRun  # noqa: E402

VENV_ENV = "QUANTA_PEER_VENV"
DEFAULT_VENV = ROOT / ".venv-peers"
BUILD = "bench/peer_env.sh (make peers-old)"

# system -> (runner, Syne Tune method or None)
PEER_SYSTEMS: dict[str, tuple[str, str | None]] = {
    "syne_mobster_exact": ("syne", "mobster"),
    "syne_hypertune_exact": ("syne", "hypertune"),
    "syne_dyhpo_exact": ("syne", "dyhpo"),
    "dehb_exact": ("dehb", None),
}


def peer_python() -> Path:
    venv = os.environ.get(VENV_ENV)
    return (Path(venv) if venv else DEFAULT_VENV) / "bin" / "python"


def missing_reason() -> str | None:
    """Why the peer environment cannot run here, or None."""
    py = peer_python()
    if not py.exists():
        return f"no peer environment at {py.parent.parent} (build it with {BUILD}, or set {VENV_ENV})"
    return None


def run_peer(
    system: str,
    task: str,
    seed: int,
    workers: int,
    hours: float,
    targets: Mapping[str, float],
    stop_at: float | None,
    data: Path | None,
    timeout: float | None = None,
) -> PeerRun:
    """One run of a `PEER_SYSTEMS` system in the peer environment (module docstring)."""
    if system not in PEER_SYSTEMS:
        raise ValueError(f"system: unknown peer {system!r} (known: {', '.join(PEER_SYSTEMS)})")
    reason = missing_reason()
    if reason is not None:
        raise RuntimeError(f"{system}: {reason}")
    with tempfile.TemporaryDirectory(prefix="quanta-peer-") as folder:
        out = Path(folder) / "run.json"
        cmd = [
            str(peer_python()),
            str(ROOT / "bench" / "peer_env.py"),
            "--system", system, "--task", task, "--seed", str(seed), "--workers", str(workers),
            "--hours", repr(float(hours)), "--targets", json.dumps(dict(targets)), "--out", str(out),
        ]  # fmt: skip
        if stop_at is not None:
            cmd += ["--stop-at", repr(float(stop_at))]
        if data is not None:
            cmd += ["--data", str(data)]
        # This tree first on the path, so the peer runs this tree's surrogate and accounting.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"{system} on task {task} seed {seed} failed in the peer environment "
                f"({peer_python()}, exit {proc.returncode}):\n{proc.stderr[-4000:]}"
            )
        d = json.loads(out.read_text())
    return PeerRun(
        method=d["method"],
        time_to_target=d["time_to_target"],
        best_so_far=[(float(t), float(v)) for t, v in d["best_so_far"]],
        started=int(d["started"]),
        sim_seconds=float(d["sim_seconds"]),
        wall_seconds=float(d["wall_seconds"]),
    )


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("syne-tune", "dehb", "numpy", "onnxruntime", "yahpo-gym", "autograd"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="One LCBench peer run in the peer environment (bench/peer_env.py).")
    ap.add_argument("--system", required=True, choices=sorted(PEER_SYSTEMS))
    ap.add_argument("--task", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--hours", type=float, required=True)
    ap.add_argument("--targets", required=True, help='JSON object, e.g. {"medium": 0.99, "hard": 0.994}')
    ap.add_argument("--stop-at", type=float, default=None)
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        targets = {str(k): float(v) for k, v in json.loads(args.targets).items()}
    except (ValueError, AttributeError) as exc:
        ap.error(f"--targets: not a JSON object of numbers ({exc})")
    runner, method = PEER_SYSTEMS[args.system]
    common: dict[str, Any] = dict(
        workers=args.workers, hours=args.hours, seed=args.seed, targets=targets, stop_at=args.stop_at,
        data_path=args.data,
    )  # fmt: skip
    if runner == "syne":
        from bench.syne_lcbench import run_syne_method

        assert method is not None
        run = run_syne_method(method, args.task, clock="exact", **common)
    else:
        from bench.dehb_lcbench import run_dehb

        run = run_dehb(args.task, **common)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({**asdict(run), "versions": _versions()}))
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
