"""Gandiva's placement: which units run (capacity counted without grow-shrink loans), then on which
devices (fewest moves, then locality).

Running trials stay where they are; a trial spread over nodes is consolidated as soon as one node can
hold it; parked trials resume on their own devices when free; the others move onto free devices (a
move = `Migrate`): this is how the highest-ranked parked trial lands on a device that just freed.
Multi-device trials take devices of one node when one node fits. On a cluster of several device kinds
a unit only takes devices of kinds all its trials run on, the kinds they gain most on first
(`Board.choose_in`, `app.executor.policy.kinds`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from app.executor.policy.gandiva.packs import Pack, Unit
from app.executor.policy.placing import Board
from app.executor.policy.types import TrialView


def units(
    exclusive: Sequence[TrialView],
    pool: Sequence[TrialView],
    pack_of: Mapping[int, Pack],
    by_id: Mapping[int, TrialView],
) -> list[Unit]:
    """Units in rank order: the exclusive trials, then the pool, a pack being one unit at its better
    member's place (that member first)."""
    out: list[Unit] = [(t,) for t in exclusive]
    seen: set[int] = set()
    for t in pool:
        if t.id in seen:
            continue
        pk = pack_of.get(t.id)
        if pk is not None:
            a, b = pk.members
            out.append((by_id[a], by_id[b]) if t.id == a else (by_id[b], by_id[a]))
            seen.update((a, b))
        else:
            out.append((t,))
            seen.add(t.id)
    return out


def select(ranked: Sequence[Unit], n_dev: int) -> tuple[list[Unit], list[Unit]]:
    """(selected, waiting): units taken in rank order while devices remain; a unit that does not fit
    is skipped (lower units may backfill devices it could not use)."""
    cap = n_dev
    selected: list[Unit] = []
    waiting: list[Unit] = []
    for u in ranked:
        need = max(t.devices_needed for t in u)
        if need <= cap:
            selected.append(u)
            cap -= need
        else:
            waiting.append(u)
    return selected, waiting


def place(
    board: Board,
    selected: Sequence[Unit],
    grown_old: Mapping[str, Mapping[str, Any]],
    notes: list[str],
) -> tuple[dict[int, tuple[str, ...]], list[Unit]]:
    """Put the selected units on the board: (devices of each placed trial, units left unplaced).
    `grown_old` is last round's grow-shrink loans (a grown trial's home is its base devices)."""
    order, node_of = board.order, board.node_of

    def home(u: Unit) -> tuple[str, ...] | None:
        if len(u) == 2:
            for t in sorted(u, key=lambda t: not t.running):
                if len(t.devices) == 1:
                    return t.devices
            return None
        t = u[0]
        g = grown_old.get(str(t.id))
        if g is not None and set(g.get("base", [])) <= set(t.devices) and len(g["base"]) == t.devices_needed:
            return tuple(sorted(g["base"]))
        return t.devices if len(t.devices) == t.devices_needed else None

    def spread(ds: Sequence[str]) -> bool:
        return len({node_of.get(d) for d in ds}) > 1

    placed: dict[int, tuple[str, ...]] = {}
    todo = list(selected)
    for step in ("running", "spread", "parked", "rest"):
        left = []
        for u in todo:
            h = home(u)
            running = any(t.running for t in u)
            ds: tuple[str, ...] | None = None
            if step == "running" and running and h and not spread(h) and all(board.is_free(d) for d in h):
                ds = h
            elif step == "spread" and running and h and spread(h):
                ds = choose(board, len(h), h, node_of, order, single_node=True, unit=u)
                if ds is not None:
                    notes.append(f"trial {u[0].id} consolidates onto node {node_of[ds[0]]}")
                elif all(board.is_free(d) for d in h):
                    ds = h
            elif step == "parked" and h and all(board.is_free(d) for d in h):
                ds = h
            elif step == "rest":
                need = max(t.devices_needed for t in u)
                ds = choose(board, need, u[0].devices, node_of, order, unit=u)
                if ds is not None and u[0].devices and set(ds) != set(u[0].devices):
                    notes.append(f"trial {u[0].id} moves {','.join(u[0].devices)} -> {','.join(ds)}")
            if ds is None:
                left.append(u)
            else:
                for t in u:
                    board.put(t.id, ds)
                    placed[t.id] = ds
        todo = left
    return placed, todo


def choose(
    board: Board,
    need: int,
    resident: Sequence[str],
    node_of: Mapping[str, str],
    order: Mapping[str, int],
    *,
    single_node: bool = False,
    unit: Sequence[TrialView] = (),
) -> tuple[str, ...] | None:
    """Free devices for a trial needing `need`: its resident ones when they are free and on one node,
    else a node that fits it (the one holding most of its resident devices, then the fullest that
    fits), its resident devices first; else (unless `single_node`) its resident devices if free, else
    devices from the nodes with most free devices. None when fewer than `need` devices are free.
    When the kinds of the cluster restrict or order the choice for `unit`'s trials, the board's
    kind-aware choice (`Board.choose_in`) decides instead."""
    if need <= 0 or board.n_free < need:
        return None
    tiers = board.tiers(unit) if any(t.kind_rates for t in unit) else None
    if tiers is not None:
        return board.choose_in(need, resident, tiers, single_node=single_node)
    res = [d for d in resident if d in board.slots]
    res_set = set(res)
    res_free = len(res) == need and all(board.is_free(d) for d in res)
    if res_free and len({node_of[d] for d in res}) == 1:
        return tuple(sorted(res))
    # The node holding most of its resident devices that fits, then the fullest node that fits.
    home = Counter(node_of[d] for d in res)
    at_home = [n for n in home if board.n_free_on(n) >= need]
    node = min(at_home, key=lambda n: (-home[n], board.n_free_on(n), n)) if at_home else board.fullest_fitting(need)
    if node is not None:
        ds = sorted(board.free_on(node), key=lambda d: (d not in res_set, order[d]))[:need]
        return tuple(sorted(ds))
    if single_node:
        return None
    if res_free:
        return tuple(sorted(res))
    by_node = board.free_by_node()
    out: list[str] = []
    for n in sorted(by_node, key=lambda n: (-len(by_node[n]), n)):
        out.extend(sorted(by_node[n], key=lambda d: (d not in res_set, order[d])))
    return tuple(sorted(out[:need]))
