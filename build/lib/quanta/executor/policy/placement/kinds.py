"""Device kinds (Gavel, Narayanan et al., OSDI 2020): effective throughput, and placement that gives
each kind of device to the trials that gain most from it.

**Effective throughput.** A trial's rate on kind k is `TrialView.rate_on(k)` (mini-batches per second,
measured there or known beforehand). Its *effective* rate on k is that rate over its rate on the
cluster's average device::

    eff(t, k) = r(t, k) / (sum over kinds k' of n_k' * r(t, k') / D)      (n_k devices of kind k, D in all)

so a device-second on kind k is worth eff(t, k) device-seconds of the average device to t: 1 on a
cluster of one kind, more than 1 on a kind t is fast on, 0 on a kind it cannot run on (rate 0). A
kind t has no figure for counts as the mean of its known positive rates (no preference), and a trial
with no figure for any of the cluster's kinds has eff 1 everywhere. The share layer counts device time
in these units (`quanta.executor.policy.share`), so a user on the devices its trials gain most from is
charged for that gain, and fair shares stay in devices of the average kind.

**Placement.** A trial is never placed on a kind where its rate is 0 (`usable`). With
`ClusterSnapshot.kind_aware` (the default), `Board.choose` prefers, for each trial, the free kind where
its effective rate is highest (`kind_tiers`); `quanta.executor.policy.placement.kind_rebalance` then moves placed
trials between kinds while that raises their summed effective rate. With `kind_aware` off the choice
among usable kinds is kind-blind (the policies' own).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from quanta.executor.policy.types import ClusterSnapshot, DeviceView, TrialView


@dataclass(frozen=True)
class KindMap:
    """The kinds of a cluster's devices: `kind_of[device]`, `counts[kind]` (devices of each kind, in
    device order), `node_kinds[node]` (the kinds on each node), `total` devices and `order[device]`
    (its index)."""

    kind_of: Mapping[str, str]
    counts: Mapping[str, int]
    node_kinds: Mapping[str, frozenset[str]]
    total: int
    order: Mapping[str, int]

    @property
    def several(self) -> bool:
        return len(self.counts) > 1


_kind_cache: list[tuple[tuple[DeviceView, ...], KindMap]] = []


def kind_map(devices: tuple[DeviceView, ...]) -> KindMap:
    """The `KindMap` of `devices`, memoised on the tuple itself (snapshots share it while the cluster
    does not change)."""
    for devs, km in _kind_cache:
        if devs is devices:
            return km
    counts: dict[str, int] = {}
    node_kinds: dict[str, set[str]] = {}
    for d in devices:
        counts[d.kind] = counts.get(d.kind, 0) + 1
        node_kinds.setdefault(d.node, set()).add(d.kind)
    km = KindMap(
        {d.id: d.kind for d in devices},
        counts,
        {n: frozenset(ks) for n, ks in node_kinds.items()},
        len(devices),
        {d.id: i for i, d in enumerate(devices)},
    )
    _kind_cache[:] = [(devices, km), *_kind_cache[:3]]  # a few: the share layer's sub-snapshots too
    return km


def effective_rates(trial: TrialView, counts: Mapping[str, int]) -> dict[str, float]:
    """eff(trial, k) for every kind k of a cluster with `counts[k]` devices of kind k (the module
    docstring)."""
    total = sum(counts.values())
    known = {k: r for k, r in trial.kind_rates if k in counts}
    if not known or total <= 0:
        return dict.fromkeys(counts, 1.0)
    positive = [r for r in known.values() if r > 0]
    fill = sum(positive) / len(positive) if positive else 1.0
    rate = {k: max(0.0, known.get(k, fill)) for k in counts}
    avg = sum(counts[k] * rate[k] for k in counts) / total
    if avg <= 0:
        return dict.fromkeys(counts, 0.0)
    return {k: rate[k] / avg for k in counts}


class Effective:
    """eff(t, k) of a snapshot's trials, computed once per trial (a round asks many times). Normalised
    over the whole cluster: `ClusterSnapshot.kind_counts` when given (a share group's sub-snapshot),
    else the snapshot's own devices."""

    def __init__(self, snapshot: ClusterSnapshot):
        self.kinds = kind_map(snapshot.devices)
        self.counts: Mapping[str, int] = snapshot.kind_counts or self.kinds.counts
        self._memo: dict[int, dict[str, float]] = {}

    def of(self, trial: TrialView) -> dict[str, float]:
        got = self._memo.get(trial.id)
        if got is None:
            got = self._memo[trial.id] = effective_rates(trial, self.counts)
        return got

    def usable(self, trial: TrialView, kind: str) -> bool:
        """Whether `trial` can run on devices of `kind` (its rate there is not 0)."""
        return self.of(trial).get(kind, 1.0) > 0


def kind_tiers(
    eff: Effective, trials: Sequence[TrialView], aware: bool, kinds: Iterable[str] | None = None
) -> list[frozenset[str]] | None:
    """The kinds `trials` (one, or a pack sharing devices) may be placed on, in tiers of preference
    (best summed effective rate first; one tier when kind-blind), restricted to `kinds` when given.
    None when nothing restricts or orders the choice (every kind usable, and one kind or kind-blind):
    the caller's kind-blind choice applies unchanged. [] when no kind is usable."""
    km = eff.kinds
    effs = [eff.of(t) for t in trials]
    usable = {k for k in km.counts if all(e.get(k, 1.0) > 0 for e in effs)}
    if kinds is not None:
        usable &= set(kinds)
    if not usable:
        return []
    everything = len(usable) == len(km.counts)
    if not aware or not km.several:
        return None if everything else [frozenset(usable)]
    score = {k: round(sum(e.get(k, 1.0) for e in effs), 9) for k in usable}
    levels = sorted(set(score.values()), reverse=True)
    if len(levels) == 1 and everything:
        return None
    return [frozenset(k for k in usable if score[k] == s) for s in levels]
