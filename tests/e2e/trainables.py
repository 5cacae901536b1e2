"""Trainables for the browser tests (the server's allowlist admits `tests.`)."""

from __future__ import annotations

import sys

from quanta.sdk import Trial
from tests.trainables import linear


def chatty(config: dict, trial: Trial) -> None:
    """`tests.trainables:linear` that also writes to its log: a line on stdout naming its learning rate,
    one on stderr, and one when its steps are done."""
    print(f"chatty: starting with lr={config['lr']!r}", flush=True)
    print("chatty: a line on stderr", file=sys.stderr, flush=True)
    linear(config, trial)
    print("chatty: steps done", flush=True)
