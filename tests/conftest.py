"""Shared fixtures. Integration tests use real trial processes on CPU devices."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("QUANTA_TRACES", str(ROOT.parent / "shared" / "data" / "traces"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords and not has_cuda:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _sigint_restored():
    """Each test leaves Ctrl-C's handler as it found it: code run in-process (a trial template's or a
    trial process's main, a command's handlers) may ignore SIGINT, and an ignored SIGINT is inherited by
    every process the later tests start, where Python then never raises KeyboardInterrupt."""
    import signal

    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)
