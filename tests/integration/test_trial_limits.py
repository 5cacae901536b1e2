"""A trial's memory is capped (`max_trial_rss_mb`, QUANTA_TRIAL_MAX_RSS_MB): a real trial process that
leaks past the cap is killed and fails with the reason, and the trial beside it is untouched."""

from __future__ import annotations

import pytest

from quanta.devices import parse_devices
from quanta.executor.actions import Exited, Reported, Run
from quanta.executor.runtime.local import LocalRuntime
from quanta.executor.runtime.memory_cap import env_rss_cap
from tests.integration.helpers import collect_until_exit, launches

CAP_MB = 900.0


def test_a_trial_over_its_memory_cap_fails_with_the_reason(tmp_path) -> None:
    table = {
        1: ("tests.trainables:hog", {"mb": 64, "max_mb": 4000, "steps": 100_000}),
        2: ("tests.trainables:linear", {"steps": 200, "report_every": 50}),
    }
    rt = LocalRuntime(
        parse_devices("cpu:2"), launches(tmp_path, table), warm_modules=["tests.trainables"], max_trial_rss_mb=CAP_MB
    )
    try:
        rt.apply(1, [Run(1, ("cpu:0",)), Run(2, ("cpu:1",))])
        events = collect_until_exit(rt, {1, 2}, timeout=120)
    finally:
        rt.close()
    exits = {e.trial_id: e for e in events if isinstance(e, Exited)}
    assert exits[1].status == "failed", exits[1]
    assert f"over the limit of {CAP_MB:.0f} MB" in (exits[1].error or "")
    assert any(isinstance(e, Reported) and e.trial_id == 1 for e in events), "it ran before it was stopped"
    assert exits[2].status == "completed" and exits[2].steps == 200


def test_the_cap_from_the_environment_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUANTA_TRIAL_MAX_RSS_MB", "512")
    assert env_rss_cap() == 512.0
    monkeypatch.setenv("QUANTA_TRIAL_MAX_RSS_MB", "")
    assert env_rss_cap() is None
    for bad in ("lots", "-5", "0"):
        monkeypatch.setenv("QUANTA_TRIAL_MAX_RSS_MB", bad)
        with pytest.raises(ValueError, match="QUANTA_TRIAL_MAX_RSS_MB"):
            env_rss_cap()
