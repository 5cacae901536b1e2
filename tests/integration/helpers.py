"""Helpers for tests that drive a LocalRuntime directly."""

from __future__ import annotations

import time
from pathlib import Path

from quanta.executor.actions import Event, Exited, TrialLaunch
from quanta.executor.runtime.base import LaunchFn
from quanta.executor.runtime.local import LocalRuntime


def launches(tmp: Path, table: dict[int, tuple[str, dict]], max_steps: int = 200, **kw) -> LaunchFn:
    def launch(tid: int) -> TrialLaunch:
        trainable, config = table[tid]
        return TrialLaunch(
            tid,
            trainable,
            config,
            config.get("steps", max_steps),
            str(tmp / f"ckpt-{tid}.pt"),
            log_path=str(tmp / f"trial-{tid}.log"),
            **kw,
        )

    return LaunchFn(launch)


def collect_until_exit(rt: LocalRuntime, ids: set[int], timeout: float = 60) -> list[Event]:
    """Poll events until every trial in `ids` has exited (or fail after `timeout`)."""
    events: list[Event] = []
    left = set(ids)
    end = time.monotonic() + timeout
    while left and time.monotonic() < end:
        for e in rt.poll(0.2):
            events.append(e)
            if isinstance(e, Exited):
                left.discard(e.trial_id)
    assert not left, f"trials {left} did not exit within {timeout} s"
    return events
