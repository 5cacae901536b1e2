"""A search's result as users read it (`quanta run --output`, the API): built from the store."""

from __future__ import annotations

from typing import Any

from quanta.db.protocol import ControllerStore
from quanta.db.public.readable import parsed_spec
from quanta.status import TrialCounts, count_trials


def search_result(store: ControllerStore, search_id: int) -> dict[str, Any]:
    """`best_params`, `best_metric`, `reached`, `seconds_to_target`, `wall_seconds` (the time it ran),
    `status`, `tags`, `notes`, `error` (why a failed search failed), `warning` (what the controller
    warned about), `counts` (how the trials stand: `quanta.status.TrialCounts.as_dict`), and `trials`: one
    object per trial with `id`, `number`, `params`, `status`, `metric` (last reported objective),
    `best_metric`, `steps`, `device_seconds`, `retries`, `error` (a failed trial's traceback), `reason`
    (why a stopped or killed trial ended early)."""
    row = store.search(search_id)
    if row is None:
        raise KeyError(f"search {search_id} not found")
    spec = parsed_spec(row)
    end = row.finished_at
    # The time it ran: a resumed search's time spent ended is not counted (`SearchRow.idle_seconds`).
    wall = (end - row.started_at - row.idle_seconds) if (end is not None and row.started_at is not None) else None
    trials = store.trials(search_id)
    if row.trial_counts is not None:
        counts = TrialCounts.from_dict(row.trial_counts)
    else:  # stored before the controller stored counts: running and parked are not told apart
        counts = count_trials((t.status, t.started_at is not None, True, False) for t in trials)
    return {
        "search_id": row.id,
        "name": row.name,
        "status": row.status,
        "error": row.error,
        "warning": row.warning,
        "counts": counts.as_dict(),
        "best_params": row.best_params,
        "best_metric": row.best_metric,
        "best_trial_id": row.best_trial_id,
        "reached": bool(row.reached),
        "target": spec.target_text() if spec else None,
        "seconds_to_target": row.seconds_to_target,
        "wall_seconds": wall,
        "tags": list(row.tags or []),
        "notes": row.notes,
        "trials": [
            {
                "id": t.id,
                "number": t.number,
                "params": t.params,
                "status": t.status,
                "metric": t.metric,
                "best_metric": t.best_metric,
                "steps": t.steps,
                "device_seconds": round(t.device_seconds, 3),
                "retries": t.retries,
                "error": t.error,
                "reason": t.reason,
            }
            for t in trials
        ],
    }
