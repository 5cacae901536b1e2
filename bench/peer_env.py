"""LCBench peers that run in a Python environment of their own: MOBSTER, Hyper-Tune and DyHPO (Syne Tune
0.14.2, the last release with them), DEHB (`dehb` 0.1.2), and Syne Tune 0.14.2's multi-objective random
scalarisation for `bench/lcbench_mo.py`. Both pin numpy < 1.27, the main environment
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
- `PEER_MO_METHODS`: method name in `bench/lcbench_mo.py` -> `syne_lcbench_mo.run_syne_mo`'s method;
  `run_peer_mo(method, task, seed, workers, hours, reference, goal, data) -> MORun` as `run_peer`.
- `python bench/peer_env.py --system S --task T --seed N --workers W --hours H --targets JSON
  [--stop-at X] [--data DIR] --out FILE` (inside the environment): runs one and writes the PeerRun as
  JSON to FILE (written whole or not at all), plus the versions that ran it; with `--mo-method M
  --reference "[ACC, SECONDS]" --goal HV [--max-wall-s S]` instead of `--system` and `--targets`, a
  multi-objective run and its MORun.
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

# bench/lcbench_mo.py method -> Syne Tune 0.14.2 multi-objective method (bench/syne_lcbench_mo.py)
PEER_MO_METHODS: dict[str, str] = {"syne_rsbo": "rsbo"}


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
    args = [
        "--system", system, "--task", task, "--seed", str(seed), "--workers", str(workers),
        "--hours", repr(float(hours)), "--targets", json.dumps(dict(targets)),
    ]  # fmt: skip
    if stop_at is not None:
        args += ["--stop-at", repr(float(stop_at))]
    d = _run_in_env(system, task, seed, args, data, timeout)
    return PeerRun(
        method=d["method"],
        time_to_target=d["time_to_target"],
        best_so_far=[(float(t), float(v)) for t, v in d["best_so_far"]],
        started=int(d["started"]),
        sim_seconds=float(d["sim_seconds"]),
        wall_seconds=float(d["wall_seconds"]),
    )


def run_peer_mo(
    method: str,
    task: str,
    seed: int,
    workers: int,
    hours: float,
    reference: tuple[float, float],
    goal: float,
    data: Path | None,
    timeout: float | None = None,
    max_wall_s: float | None = None,
) -> Any:
    """One run of a `PEER_MO_METHODS` method in the peer environment: `syne_lcbench_mo.run_syne_mo` there
    (until `hours`, until the front of its reports dominates `goal` of hypervolume up to `reference`, or
    until `max_wall_s` of wall time), returned as its `MORun`."""
    from bench.syne_lcbench_mo import MORun

    if method not in PEER_MO_METHODS:
        raise ValueError(f"method: unknown peer {method!r} (known: {', '.join(PEER_MO_METHODS)})")
    args = [
        "--mo-method", PEER_MO_METHODS[method], "--task", task, "--seed", str(seed), "--workers", str(workers),
        "--hours", repr(float(hours)), "--reference", json.dumps(list(reference)), "--goal", repr(float(goal)),
    ]  # fmt: skip
    if max_wall_s is not None:
        args += ["--max-wall-s", repr(float(max_wall_s))]
    d = _run_in_env(method, task, seed, args, data, timeout)
    return MORun(
        reports=[(float(t), float(a), float(s)) for t, a, s in d["reports"]],
        started=int(d["started"]),
        sim_seconds=float(d["sim_seconds"]),
        wall_seconds=float(d["wall_seconds"]),
        reached=bool(d["reached"]),
        cut=bool(d.get("cut", False)),
    )


def _run_in_env(
    name: str, task: str, seed: int, args: list[str], data: Path | None, timeout: float | None
) -> dict[str, Any]:
    """`python bench/peer_env.py ARGS --out FILE` in the peer environment; FILE's JSON. Raises
    RuntimeError naming `name`, the task and seed, with the subprocess's own error, when it fails."""
    reason = missing_reason()
    if reason is not None:
        raise RuntimeError(f"{name}: {reason}")
    with tempfile.TemporaryDirectory(prefix="quanta-peer-") as folder:
        out = Path(folder) / "run.json"
        cmd = [str(peer_python()), str(ROOT / "bench" / "peer_env.py"), *args, "--out", str(out)]
        if data is not None:
            cmd += ["--data", str(data)]
        # This tree first on the path, so the peer runs this tree's surrogate and accounting.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(
                f"{name} on task {task} seed {seed} failed in the peer environment "
                f"({peer_python()}, exit {proc.returncode}):\n{proc.stderr[-4000:]}"
            )
        doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("syne-tune", "dehb", "numpy", "onnxruntime", "yahpo-gym", "autograd", "moocore"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="One LCBench peer run in the peer environment (bench/peer_env.py).")
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--system", choices=sorted(PEER_SYSTEMS))
    which.add_argument("--mo-method", choices=sorted(PEER_MO_METHODS.values()))
    ap.add_argument("--task", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--hours", type=float, required=True)
    ap.add_argument("--targets", help='with --system: JSON object, e.g. {"medium": 0.99, "hard": 0.994}')
    ap.add_argument("--stop-at", type=float, default=None)
    ap.add_argument("--reference", help="with --mo-method: the reference point, JSON [accuracy, seconds]")
    ap.add_argument("--goal", type=float, help="with --mo-method: the hypervolume to stop at")
    ap.add_argument("--max-wall-s", type=float, default=None, help="with --mo-method: the run's wall-time cap")
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    doc: dict[str, Any]
    if args.mo_method is not None:
        try:
            acc, secs = (float(x) for x in json.loads(args.reference))
        except (TypeError, ValueError) as exc:
            ap.error(f"--reference: not a JSON pair of numbers ({exc})")
        if args.goal is None:
            ap.error("--goal: needed with --mo-method")
        from bench.syne_lcbench_mo import run_syne_mo

        mo = run_syne_mo(
            args.mo_method, args.task, workers=args.workers, hours=args.hours, seed=args.seed,
            reference=(acc, secs), goal=args.goal, data_path=args.data, max_wall_s=args.max_wall_s,
        )  # fmt: skip
        doc = asdict(mo)
    else:
        try:
            targets = {str(k): float(v) for k, v in json.loads(args.targets).items()}
        except (TypeError, ValueError, AttributeError) as exc:
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
        doc = asdict(run)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({**doc, "versions": _versions()}))
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
