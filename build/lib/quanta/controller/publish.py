"""`cluster_view`: what runs where, as the API's `/cluster` and the dashboard read it (a pure function of
the snapshot a plan was made on and the plan; the controller stores it with `publish_cluster_view`)."""

from __future__ import annotations

from quanta.db.models import ClusterView, DevicePlacement, PairRates
from quanta.executor.policy.types import ClusterSnapshot, Plan


def cluster_view(snapshot: ClusterSnapshot, plan: Plan, round_no: int) -> ClusterView:
    """Devices with the trials running and parked on each, measured pair rates, and the plan's notes."""
    resident = {t.id: t for t in snapshot.trials if t.devices}
    placed = plan.running()
    devices = tuple(
        DevicePlacement(
            d.id,
            d.node,
            d.kind,
            d.memory_mb,
            running=tuple(plan.placement.get(d.id, ())),
            parked=tuple(sorted(t.id for t in resident.values() if d.id in t.devices and t.id not in placed)),
        )
        for d in snapshot.devices
    )
    pairs = tuple(
        PairRates(
            a,
            b,
            ra,
            rb,
            solo_a=resident[a].rate_solo if a in resident else None,
            solo_b=resident[b].rate_solo if b in resident else None,
        )
        for (a, b), (ra, rb) in snapshot.pair_rates.items()
    )
    return ClusterView(snapshot.now, devices, pairs, tuple(plan.notes), round_no)
