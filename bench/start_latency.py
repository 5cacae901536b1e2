"""Start to the first mini-batch, cold (`quanta run`) and on a running service (`quanta serve` + POST).

The goal is the first mini-batch of the first trial within 1.5 s of `quanta run`. A cold
`quanta run` must import torch (and torch._dynamo, which building any optimizer pulls in) before a
trial can compute; a running `quanta serve` has paid that once in its pre-warmed template, so a
search posted to it starts from a fork. This script measures both, the way a user meets them:

- `cold`: `quanta run SPEC` in a new process (as `bench/search.py` runs it), wall seconds from the
  launch to the end of the first trial's first mini-batch (its first report at step 0);
- `served`: one `quanta serve` started once, then `--repeats` + 1 searches posted one after the other
  through the REST API (`quanta.sdk.Client`), wall seconds from the POST to the first report at step 0
  of that search. The first search, posted 5 s after the server answers, is `served_first`: it may
  still wait for the template to finish importing torch, and it warms the trainable's module there;
  the others are `served`, a server that has been up a while;
- `import_torch`: a bare `python -c "import torch"`, to the end of the import (not of the process);
- `import_torch_optim`: `import torch` and building one Adam optimizer, which imports torch._dynamo
  (torch.optim's methods are wrapped to disable dynamo, and that wrapper imports it on first use): what
  the template must import before any trainable can build its optimizer. A trial cannot compute before
  this, so it is the floor under the cold figure; the cold path's own work is what lies above it.

    python bench/start_latency.py --repeats 5 --json bench/results/start_latency.json

Prints a table (median, min, max per path) and writes {"spec", "repeats", "paths": {name: {"runs_s",
"median_s", "min_s", "max_s"}}}. Run it on a quiet machine: it times processes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from quanta.spec import SearchSpec, load_spec, parse_spec  # noqa: E402


def small_spec(path: Path, seed: int) -> SearchSpec:
    """The workload's spec cut to one short search: 2 trials of 100 steps, no target to stop at."""
    raw = load_spec(path).model_dump(mode="json")
    raw["seed"] = seed
    raw["budget"] = {"max_trials": 2, "max_steps": 100, "max_seconds": 120}
    raw["metric"] = {**raw["metric"], "target": None}
    return parse_spec(raw)


def first_step_at(db: str) -> float | None:
    """Wall-clock time (epoch seconds) of the earliest report at step 0 in the database."""
    from quanta.db.store import Store

    store = Store(db)
    reports = [r for s in store.searches() if s.id is not None for r in store.search_reports(s.id)]
    return min((r.at for r in reports if r.step == 0), default=None)


def cold_run(spec: SearchSpec, devices: int) -> float | None:
    with tempfile.TemporaryDirectory(prefix="qstart-cold-") as work:
        spec_path = Path(work) / "spec.json"
        spec_path.write_text(spec.model_dump_json())
        db = f"sqlite:///{work}/q.db"
        cmd = [sys.executable, "-m", "quanta.cli", "run", str(spec_path), "--devices", f"cpu:{devices}"]
        t0 = time.time()
        subprocess.run(
            [*cmd, "--db", db, "--workdir", f"{work}/.quanta"], cwd=ROOT, capture_output=True, timeout=300, check=False
        )
        at = first_step_at(db)
        return None if at is None else at - t0


def torch_import(code: str = "import torch") -> float:
    """Seconds from launching `python -c code` to the end of `code` (the process prints the time then:
    its exit, which takes most of a second once torch._dynamo is loaded, is not part of a start)."""
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import time; print(time.time())"], check=True, capture_output=True, text=True
    )
    return float(out.stdout.split()[-1]) - t0


OPTIM = "import torch; torch.optim.Adam([torch.zeros(1, requires_grad=True)])"
PATHS = ("import_torch", "import_torch_optim", "cold", "served")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def served_runs(specs: list[SearchSpec], devices: int) -> list[float | None]:
    """Start one `quanta serve`, post each spec once it is up (one after the other, each to its end)."""
    import httpx

    from quanta.sdk import Client

    out: list[float | None] = []
    with tempfile.TemporaryDirectory(prefix="qstart-served-") as work:
        db = f"sqlite:///{work}/q.db"
        port = _free_port()
        token = "bench-" + os.urandom(16).hex()
        # The data-set cache `quanta run` from the repository uses (examples/mnist1d.py `load_data`).
        cache = str(ROOT / ".quanta" / "cache")
        env = {**os.environ, "QUANTA_TOKEN": token, "PYTHONPATH": str(ROOT), "QUANTA_CACHE_DIR": cache}
        cmd = [sys.executable, "-m", "quanta.cli", "serve", "--port", str(port), "--db", db]
        cmd += ["--devices", f"cpu:{devices}"]
        log = open(Path(work) / "serve.log", "w")  # noqa: SIM115  (closed below, after the server)
        server = subprocess.Popen([*cmd, "--workdir", f"{work}/.quanta"], cwd=work, env=env, stdout=log, stderr=log)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + 60
            while True:
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.time() > deadline or server.poll() is not None:
                    raise SystemExit(f"quanta serve did not come up; see {work}/serve.log")
                time.sleep(0.1)
            time.sleep(5)  # the template warms torch after the server answers: let it finish, as on a server
            with Client(url, token) as client:
                for spec in specs:
                    t0 = time.time()
                    search = client.submit(spec.model_dump(mode="json"))
                    search.wait(timeout=120, progress=False)
                    at = _first_report_of(db, search.id)
                    out.append(None if at is None else at - t0)
        finally:
            server.terminate()
            server.wait(30)
            log.close()
    return out


def _first_report_of(db: str, search_id: int) -> float | None:
    from quanta.db.store import Store

    return min((r.at for r in Store(db).search_reports(search_id) if r.step == 0), default=None)


def _served(runs: list[float | None]) -> dict[str, dict[str, Any]]:
    return {"served_first": summary(runs[:1]), "served": summary(runs[1:])}


def summary(runs: list[float | None]) -> dict[str, Any]:
    ok = [r for r in runs if r is not None]
    return {
        "runs_s": [None if r is None else round(r, 3) for r in runs],
        "median_s": round(statistics.median(ok), 3) if ok else None,
        "min_s": round(min(ok), 3) if ok else None,
        "max_s": round(max(ok), 3) if ok else None,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "mnist1d.yaml")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--paths",
        default=",".join(PATHS),
        help=f"comma-separated paths to measure, of {', '.join(PATHS)} (default: all; served gives served_first too)",
    )
    args = ap.parse_args(argv)
    chosen = [p for p in args.paths.split(",") if p]
    unknown = [p for p in chosen if p not in PATHS]
    if unknown or not chosen:
        ap.error(f"--paths: unknown {unknown or 'none given'} (known: {', '.join(PATHS)})")
    specs = [small_spec(args.spec, seed) for seed in range(args.repeats)]
    # Interleaved per repeat: this machine's speed drifts by tens of percent within minutes, and the
    # floors are only comparable with the cold runs measured beside them.
    measure = {
        "import_torch": lambda spec: torch_import(),
        "import_torch_optim": lambda spec: torch_import(OPTIM),
        "cold": lambda spec: cold_run(spec, args.devices),
    }
    runs: dict[str, list[float | None]] = {name: [] for name in measure if name in chosen}
    for spec in specs:
        for name in runs:
            runs[name].append(measure[name](spec))
    paths = {name: summary(values) for name, values in runs.items()}
    if "served" in chosen:
        paths.update(_served(served_runs([small_spec(args.spec, 1000), *specs], args.devices)))
    table = Table(title="start to the first mini-batch (s)")
    for col in ("path", "median", "min", "max", "runs"):
        table.add_column(col)
    for name, row in paths.items():
        table.add_row(name, str(row["median_s"]), str(row["min_s"]), str(row["max_s"]), str(row["runs_s"]))
    Console().print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"spec": str(args.spec), "repeats": args.repeats, "paths": paths}, indent=2))


if __name__ == "__main__":
    main()
