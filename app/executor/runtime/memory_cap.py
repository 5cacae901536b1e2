"""The cap on a trial process's resident memory (`max_trial_rss_mb`, QUANTA_TRIAL_MAX_RSS_MB).

`MemoryWatchdog.check` is called from the reader thread's loop; at most every `MEMORY_EVERY_S` it reads
each live trial's resident memory from /proc (`rss_mb`) and kills, with its process group, a trial over
the cap, leaving the reason in the handle's `over_memory`. The reader then ends that trial `failed`
with the reason rather than `crashed`: restarting it would only grow past the cap again.

RSS counts the pages a forked trial shares with the template (torch's libraries, a prepared data set),
so the cap must sit above that.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping

from quanta.executor.runtime.template import kill_group
from quanta.executor.runtime.trial_handle import TrialHandle

log = logging.getLogger("quanta.runtime")

MEMORY_EVERY_S = 0.25  # how often the memory watchdog reads the trials' resident memory
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20


def rss_mb(pid: int) -> float | None:
    """Resident memory of process `pid` in MB (Linux /proc), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return None


def env_rss_cap() -> float | None:
    """QUANTA_TRIAL_MAX_RSS_MB as a positive number of MB, or None when unset or empty."""
    text = os.environ.get("QUANTA_TRIAL_MAX_RSS_MB", "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"QUANTA_TRIAL_MAX_RSS_MB: expected a number of MB, got {text!r}") from None
    if not value > 0:
        raise ValueError(f"QUANTA_TRIAL_MAX_RSS_MB: must be positive, got {text!r}")
    return value


class MemoryWatchdog:
    """Kills the trial processes among `handles` (read under `lock`) whose resident memory passes `cap`
    MB; None: no cap, nothing is read."""

    def __init__(self, cap: float | None, handles: Mapping[int, TrialHandle], lock: threading.RLock):
        self.cap = cap
        self._handles = handles
        self._lock = lock
        self._checked = 0.0

    def check(self) -> None:
        """Kill trial processes over `cap` (checked every `MEMORY_EVERY_S`; sooner calls return at once)."""
        cap = self.cap
        now = time.monotonic()
        if cap is None or now - self._checked < MEMORY_EVERY_S:
            return
        self._checked = now
        with self._lock:
            live = [
                h for h in self._handles.values() if h.pid is not None and h.state != "exited" and not h.over_memory
            ]
        for h in live:
            assert h.pid is not None
            rss = rss_mb(h.pid)
            if rss is None or rss <= cap:
                continue
            h.over_memory = (
                f"trial process used {rss:.0f} MB of memory, over the limit of {cap:.0f} MB "
                f"(QUANTA_TRIAL_MAX_RSS_MB): killed"
            )
            log.warning("trial %s: %s", h.trial_id, h.over_memory)
            kill_group(h.pid)  # with what it started
