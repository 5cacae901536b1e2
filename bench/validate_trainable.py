"""What validating a posted spec's trainable costs the API process (issue 12 item 13).

The API validates each posted spec with `app.api.routes.searches.read_spec` in the server's process.
Each case runs in a fresh Python process (so nothing is imported yet, as in a server that has not seen
the module): the first validation (cold) and the median of 20 more (warm), and whether the trainable's
package or torch ended up imported into that process. Cases:

- `examples.mnist1d:train` (the shipped example; its package `examples` is empty),
- `benchpkg.trainer:train` in a temporary package whose `__init__` imports torch (as many real
  projects' packages do): the case where importing the parent into the server costs seconds.

`--code DIR` measures another checkout (for a before/after comparison). Prints a table and writes --json.
Run: python bench/validate_trainable.py --json bench/results/validate_trainable.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, statistics, sys, time
from app.api.routes.searches import read_spec
from app.api.settings import Settings

ref = sys.argv[1]
body = json.dumps({
    "name": "probe", "trainable": ref, "space": {"lr": {"uniform": [0.0, 1.0]}},
    "metric": {"name": "accuracy", "goal": "maximize"}, "budget": {"max_trials": 2, "max_steps": 10},
}).encode()
settings = Settings(trainable_allowlist="examples.,benchpkg.")
t0 = time.perf_counter()
read_spec(body, "application/json", settings)
cold = time.perf_counter() - t0
warm = []
for _ in range(20):
    t0 = time.perf_counter()
    read_spec(body, "application/json", settings)
    warm.append(time.perf_counter() - t0)
package = ref.split(".")[0]
print(json.dumps({
    "cold_ms": cold * 1000, "warm_ms": statistics.median(warm) * 1000,
    "package_imported": package in sys.modules, "torch_imported": "torch" in sys.modules,
}))
"""


def measure(code: Path, ref: str, extra_path: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), extra_path])}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, ref], cwd=code, env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"probe failed for {ref} with code at {code}:\n{out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="quanta-bench-pkg-") as tmp:
        pkg = Path(tmp) / "benchpkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("import torch  # noqa: F401  (what many projects' packages do)\n")
        (pkg / "trainer.py").write_text("def train(config, trial):\n    pass\n")
        rows = {ref: measure(args.code, ref, tmp) for ref in ("examples.mnist1d:train", "benchpkg.trainer:train")}
    print(f"code: {args.code}")
    print(f"{'trainable':<26} {'cold ms':>9} {'warm ms':>9}  package imported  torch imported")
    for ref, r in rows.items():
        print(
            f"{ref:<26} {r['cold_ms']:>9.1f} {r['warm_ms']:>9.2f}  {r['package_imported']!s:<16}  {r['torch_imported']}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"code": str(args.code), "cases": rows}, indent=2))


if __name__ == "__main__":
    main()
