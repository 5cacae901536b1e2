"""The chaos and load suite. The chaos test runs on its own cluster (real Redis, PostgreSQL, two worker
processes and a controller, as in tests/distributed/) because it kills and restarts its parts; the load
test runs against a real `quanta serve`.

Both have a short form that `make test` runs and a long form (`make chaos`) set by environment variables:
QUANTA_CHAOS_FAULTS (faults to inject, default 4: one of each kind), QUANTA_CHAOS_TRIALS,
QUANTA_CHAOS_SEED, QUANTA_LOAD_SECONDS (default 8), QUANTA_LOAD_CLIENTS (50), QUANTA_LOAD_STREAMS (20).
With QUANTA_RELIABILITY_OUT=<dir> each test also writes its figures there as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.distributed.conftest import _cluster, cluster, postgres  # noqa: F401 (fixtures of this suite too)


def env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    return int(text) if text else default


def publish(name: str, figures: dict[str, Any]) -> None:
    """Print the figures; with QUANTA_RELIABILITY_OUT set, also write them to <dir>/<name>.json."""
    print(f"\n{name}: {json.dumps(figures, indent=2, sort_keys=True)}")
    out = os.environ.get("QUANTA_RELIABILITY_OUT", "").strip()
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
