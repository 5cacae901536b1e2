"""Prometheus metrics, computed from the database at scrape time (the database is the truth, so a
restarted server reports the same figures)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from quanta.db.store import Store
from quanta.status import SearchStatus, TrialStatus

# Mechanism latencies in seconds: parking and resuming take milliseconds; migrations and cold starts longer.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _busy_fraction(intervals: list[tuple[float, float]], start: float, end: float) -> float:
    """Fraction of [start, end] covered by the union of `intervals`."""
    covered, cursor = 0.0, start
    for a, b in sorted(intervals):
        a, b = max(a, cursor), min(b, end)
        if b > a:
            covered += b - a
            cursor = b
    return covered / (end - start) if end > start else 0.0


class StoreCollector(Collector):
    """`owner_id`: trial and search counts and best metrics of this user's searches only (None: all)."""

    def __init__(self, store: Store, window_s: float = 60.0, owner_id: int | None = None):
        self.store = store
        self.window_s = window_s
        self.owner_id = owner_id

    def collect(self) -> Iterator[Metric]:
        now = time.time()
        facts = self.store.metric_facts(now - self.window_s, self.owner_id)
        trial_counts, search_counts = facts.trials_by_status, facts.searches_by_status
        cluster = self.store.cluster_view()

        g = GaugeMetricFamily("quanta_trials", "Trials by state", labels=["state"])
        for state in sorted({*map(str, TrialStatus), *trial_counts}):
            g.add_metric([state], trial_counts.get(state, 0))
        yield g

        g = GaugeMetricFamily("quanta_searches", "Searches by state", labels=["state"])
        for state in sorted({*map(str, SearchStatus), *search_counts}):
            g.add_metric([state], search_counts.get(state, 0))
        yield g

        c = CounterMetricFamily("quanta_quanta", "Measured quanta (stretches of device time) recorded")
        c.add_metric([], facts.quanta_total)
        yield c

        per_device: dict[str, list[tuple[float, float]]] = {d.id: [] for d in cluster.devices} if cluster else {}
        for devices, started, ended in facts.recent_quanta:
            for d in devices:
                per_device.setdefault(d, []).append((started, ended))
        g = GaugeMetricFamily(
            "quanta_device_busy_fraction",
            f"Fraction of the last {self.window_s:g} s each device computed a trial",
            labels=["device"],
        )
        for d in sorted(per_device):
            g.add_metric([d], round(_busy_fraction(per_device[d], now - self.window_s, now), 4))
        yield g

        by_kind: dict[str, list[float]] = {}
        for kind, ms in facts.latencies:
            if ms is not None and math.isfinite(ms):
                by_kind.setdefault(kind, []).append(ms / 1000.0)
        h = HistogramMetricFamily(
            "quanta_mechanism_latency_seconds",
            "Suspend (park), resume, migrate and start latencies of trial processes, and the controller's "
            "reaction (react: a freed device or due round to its commands)",
            labels=["kind"],
        )
        for kind in sorted({"park", "resume", *by_kind}):
            values = by_kind.get(kind, [])
            buckets = [(str(b), sum(1 for v in values if v <= b)) for b in LATENCY_BUCKETS]
            buckets.append(("+Inf", len(values)))
            h.add_metric([kind], buckets, sum(values))
        yield h

        g = GaugeMetricFamily(
            "quanta_search_best_metric", "Best objective of each search so far", labels=["search_id", "name", "metric"]
        )
        for sid, name, metric, value in facts.best_metrics:
            if math.isfinite(value):
                g.add_metric([str(sid), name, metric], value)
        yield g


def make_registry(store: Store, window_s: float, owner_id: int | None = None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, window_s, owner_id))
    return registry
