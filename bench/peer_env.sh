#!/usr/bin/env bash
# Builds the LCBench peers' environment (bench/peer_env.py): a virtual environment with the exact versions
# in bench/peer_requirements.txt (Syne Tune 0.14.2 for MOBSTER, Hyper-Tune, DyHPO and its multi-objective
# random scalarisation; DEHB 0.1.2), then checks that what bench/peer_env.py runs imports. Re-running it on a
# built environment reinstalls nothing that is already at its pinned version.
#
#   bash bench/peer_env.sh [VENV]      # default: $QUANTA_PEER_VENV, else .venv-peers at the project root
#
# PYTHON picks the interpreter (default python3.11, the main environment's, else python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-${QUANTA_PEER_VENV:-$root/.venv-peers}}"
python="${PYTHON:-$(command -v python3.11 || command -v python3)}"
start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$root/bench/peer_requirements.txt"
# This tree as `quanta` (its source is app/, mapped by pyproject.toml's package-dir), without its own
# dependencies: the peers run only its surrogate and accounting, which need numpy and onnxruntime.
"$venv/bin/python" -m pip install -q --no-deps -e "$root"
# The modules bench/peer_env.py runs, imported from this tree.
PYTHONPATH="$root" "$venv/bin/python" -c '
import syne_tune, dehb
from syne_tune.optimizer.legacy_baselines import MOBSTER, HyperTune, DyHPO, MORandomScalarizationBayesOpt
from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
import bench.syne_lcbench, bench.syne_lcbench_mo, bench.dehb_lcbench, quanta.sim.lcbench, quanta.search.pareto
print(f"syne-tune {syne_tune.__version__}: MOBSTER, HyperTune, DyHPO, MORandomScalarizationBayesOpt; dehb imports")
'
echo "peer environment ready at $venv ($((SECONDS - start)) s)"
