"""The share layer's accounts (step 1 of `quanta.executor.policy.share`): per user, exponentially decayed
device-seconds used, fair and ideal, carried between rounds in `Plan.state["share"]`; rho (Themis's
finish-time fairness) read from them; and what a placement charges each user.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SHARE_STATE", "Accounts", "allocation", "shares_of"]

SHARE_STATE = "share"


def allocation(
    placement: Mapping[str, Sequence[int]],
    user_of: Mapping[int, str],
    weight_of: Callable[[str, int], float] | None = None,
) -> dict[str, float]:
    """Devices each user holds in `placement`; a device holding k users' trials counts 1/k to each.
    With `weight_of(device, trial)` (the trial's effective rate on the device's kind), in effective
    throughput: each user's 1/k of the device times the mean weight of its trials there."""
    out: dict[str, float] = {}
    for d, ids in placement.items():
        users: dict[str, list[int]] = {}
        for i in ids:
            if i in user_of:
                users.setdefault(user_of[i], []).append(i)
        for u, mine in users.items():
            w = 1.0 if weight_of is None else sum(weight_of(d, i) for i in mine) / len(mine)
            out[u] = out.get(u, 0.0) + w / len(users)
    return out


@dataclass(frozen=True)
class Accounts:
    """Per user: decayed device-seconds `used`, `fair` and `ideal` up to `at`, and the rates of the
    last plan (charged over the interval to the next round). JSON in `Plan.state["share"]`."""

    at: float | None
    window_s: float
    users: Mapping[str, Mapping[str, float]]

    @staticmethod
    def of(state: Mapping[str, Any]) -> Accounts:
        return Accounts(state.get("at"), float(state.get("window_s", 3600.0)), state.get("users", {}))

    @staticmethod
    def carried(state: Mapping[str, Any], now: float, window_s: float) -> Accounts:
        """Last round's accounts brought up to `now`: its rates charged over the interval."""
        old = Accounts.of(state)
        if old.at is None or now <= old.at:
            return Accounts(old.at if old.at is not None else now, window_s, old.users)
        keep = math.exp(-(now - old.at) / window_s)
        users: dict[str, dict[str, float]] = {}
        for u, a in old.users.items():
            row = {
                k: float(a.get(k, 0.0)) * keep + float(a.get(f"{k}_rate", 0.0)) * window_s * (1.0 - keep)
                for k in ("used", "fair", "ideal")
            }
            users[u] = row
        return Accounts(now, window_s, users)

    def behind(self) -> dict[str, float]:
        """Fair device-seconds minus used, per user: how far each is behind its share."""
        return {u: float(a.get("fair", 0.0)) - float(a.get("used", 0.0)) for u, a in self.users.items()}

    def rho(self) -> dict[str, float]:
        """ideal / used per user with ideal time on the books (see the module docstring); a user who
        had no device time while it should have is capped at 1e6."""
        out: dict[str, float] = {}
        for u, a in self.users.items():
            ideal, used = float(a.get("ideal", 0.0)), float(a.get("used", 0.0))
            if ideal > 1e-9:
                out[u] = ideal / used if used > 1e-9 else 1e6
        return out

    def after(
        self, now: float, alloc: Mapping[str, float], fair: Mapping[str, float], ideal: Mapping[str, float]
    ) -> dict[str, Any]:
        """The state to carry: these sums, and this plan's rates (devices) to charge next round.
        Users with nothing on the books and no demand are dropped."""
        users: dict[str, dict[str, float]] = {}
        for u in sorted(set(self.users) | set(fair) | set(alloc)):
            a = self.users.get(u, {})
            row = {k: float(a.get(k, 0.0)) for k in ("used", "fair", "ideal")}
            row.update(used_rate=alloc.get(u, 0.0), fair_rate=fair.get(u, 0.0), ideal_rate=ideal.get(u, 0.0))
            if u in fair or any(v > 1e-6 for v in row.values()):
                users[u] = row
        return {"at": now, "window_s": self.window_s, "users": users}


def shares_of(policy_state: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Per user, from a share policy's carried state: device-seconds `used`, `fair` and `ideal` over the
    window, the devices held and due at the last plan (`devices`, `fair_devices`) and `rho` (when the user
    had ideal time on the books)."""
    acc = Accounts.of(policy_state.get(SHARE_STATE, {}))
    rho = acc.rho()
    out: dict[str, dict[str, float]] = {}
    for u, a in acc.users.items():
        row = {k: float(a.get(k, 0.0)) for k in ("used", "fair", "ideal")}
        row["devices"] = float(a.get("used_rate", 0.0))
        row["fair_devices"] = float(a.get("fair_rate", 0.0))
        if u in rho:
            row["rho"] = rho[u]
        out[u] = row
    return out
