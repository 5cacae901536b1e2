"""`cluster_view`: what runs where, as the API's `/cluster` and the dashboard read it (a pure function of
the snapshot a plan was made on and the plan)."""

from __future__ import annotations

from typing import Any

from app.executor.policy.types import ClusterSnapshot, Plan


def cluster_view(snapshot: ClusterSnapshot, plan: Plan, round_no: int) -> dict[str, Any]:
    """Devices with the trials running and parked on each, measured pair rates, and the plan's notes."""
    resident = {t.id: t for t in snapshot.trials if t.devices}
    devices = []
    placed = plan.running()
    for d in snapshot.devices:
        devices.append(
            {
                "id": d.id,
                "node": d.node,
                "kind": d.kind,
                "memory_mb": d.memory_mb,
                "running": list(plan.placement.get(d.id, ())),
                "parked": sorted(t.id for t in resident.values() if d.id in t.devices and t.id not in placed),
            }
        )
    pairs = [
        {
            "a": a,
            "b": b,
            "rate_a": ra,
            "rate_b": rb,
            "solo_a": resident[a].rate_solo if a in resident else None,
            "solo_b": resident[b].rate_solo if b in resident else None,
        }
        for (a, b), (ra, rb) in snapshot.pair_rates.items()
    ]
    return {"at": snapshot.now, "round_no": round_no, "devices": devices, "pairs": pairs, "notes": list(plan.notes)}
