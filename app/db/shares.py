"""`ShareQueries`: each user's share of device time, live, for the API (`GET /shares`; part of `Store`).

Two sources, each what it is best at:
- the stored quanta (what really ran): the device-seconds each user's trials computed over a recent
  window, and that as a share of all users' device-seconds there;
- the share layer's accounts, carried in the controller's policy state (`quanta.executor.policy.share`,
  `shares_of`): what the layer counts each user as due and given over its own decaying window, and
  from that the user's rho (Themis's finish-time fairness).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlmodel import Session, col, select

from quanta.db.models import ClusterView, QuantumRow, SearchRow, UserRow
from quanta.db.public.users import SharesOut, UserShareOut
from quanta.executor.policy.share import SHARE_STATE, shares_of


def _count(text: str) -> int:
    return sum(1 for p in text.split(",") if p.strip())


class ShareQueries:
    """Mixed into `Store`, which provides `session()`, `policy_state()` and `cluster_view()`."""

    def session(self) -> Session:
        raise NotImplementedError

    def policy_state(self) -> dict[str, Any]:
        raise NotImplementedError

    def cluster_view(self) -> ClusterView | None:
        raise NotImplementedError

    def device_seconds(self, since: float, until: float) -> dict[str, float]:
        """Device-seconds computed by each user's trials within [since, until], by user name, from the
        stored quanta (clipped to the window; a quantum packed with k others on its devices counts
        1/(k+1)). Searches go by their owner's id: those of a deleted user count for nobody, not for a
        new user of the same name."""
        out: dict[str, float] = {}
        with self.session() as s:
            rows = s.exec(
                select(QuantumRow, UserRow.name)
                .join(SearchRow, col(SearchRow.id) == col(QuantumRow.search_id))
                .join(UserRow, col(UserRow.id) == col(SearchRow.owner_id))
                .where(QuantumRow.ended_at >= since, QuantumRow.started_at <= until)
            ).all()
        for q, owner in rows:
            seconds = min(q.ended_at, until) - max(q.started_at, since)
            if seconds > 0:
                out[owner] = out.get(owner, 0.0) + seconds * _count(q.devices) / (1 + _count(q.packed_with))
        return out

    def shares_out(self, now: float, window_s: float, user_id: int | None = None) -> SharesOut:
        """Every user's share of device time over [now - window_s, now] and the share layer's accounts
        (`SharesOut`); with `user_id`, that user's row only (the share is still of all users' time)."""
        with self.session() as s:
            users = s.exec(select(UserRow.id, UserRow.name, UserRow.weight)).all()
        weights = {name: weight for _, name, weight in users}
        since = now - window_s
        used = self.device_seconds(since, now)
        total = sum(used.values())
        state = self.policy_state()
        accounts: Mapping[str, Any] = state.get(SHARE_STATE, {})
        books = shares_of(state)
        view = self.cluster_view()
        names = sorted(set(weights) | set(used) | set(books))
        if user_id is not None:
            names = [name for uid, name, _ in users if uid == user_id]
        rows = []
        for name in names:
            b = books.get(name)
            rows.append(
                UserShareOut(
                    name=name,
                    weight=weights.get(name, 1.0),  # the share layer's weight for a user it does not know
                    device_s=round(used.get(name, 0.0), 3),
                    share=round(used.get(name, 0.0) / total, 4) if total > 0 else None,
                    devices=b["devices"] if b else None,
                    fair_devices=b["fair_devices"] if b else None,
                    used_s=b["used"] if b else None,
                    fair_s=b["fair"] if b else None,
                    ideal_s=b["ideal"] if b else None,
                    rho=b.get("rho") if b else None,
                )
            )
        at = accounts.get("at")
        window = accounts.get("window_s")
        return SharesOut(
            at=now,
            since=since,
            window_s=window_s,
            devices=len(view.devices) if view is not None else 0,
            accounts_at=float(at) if at is not None else None,
            accounts_window_s=float(window) if window is not None else None,
            users=rows,
        )
