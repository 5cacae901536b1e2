"""Gandiva's placement: which units run (capacity counted without grow-shrink loans), then on which
devices (fewest moves, then locality).

Running trials stay where they are; a trial spread over nodes is consolidated as soon as one node can
hold it; parked trials resume on their own devices when free; the others move onto free devices (a
move = `Migrate`). Multi-device trials take devices of one node when one node fits. On a cluster of
several device kinds a unit only takes devices of kinds all its trials run on, the kinds they gain most
on first (`Board.choose_in`, `quanta.executor.policy.placement.kinds`).

Which units run: `select` takes them in rank order while devices remain, wherever they are, so the
rotation moves trials across the whole cluster (a parked trial whose devices the next unit up holds
moves onto whatever freed). `select_sticky` (`experimental.sticky`, off) time-slices trials on their
own devices, as Gandiva does: a unit with a home (the devices it is resident on) runs there when no
higher-ranked unit claims them; a unit whose home is claimed waits for its turn there, unless moving
gains it device time: its home's *load* (units resident there, itself included) exceeds the load of
enough unclaimed devices by more than one, so that its share of a device (1 / load) grows with the
move (a migration is paid once, a longer queue every round). Every such move lowers the sum of the
squared loads, so moves stop once the loads are balanced: they follow arrivals and departures, not the
rotation. Units without a home (new, released) take devices as in `select`, and `place` puts them and
the movers on the least loaded free devices (of the kinds they run on: the kind-aware choice decides
for units whose kinds restrict or order it).

With `experimental.gang` (on top of `sticky`), multi-device units are time-sliced as gangs on aligned blocks:
one that starts or moves claims, in rank order, the least loaded block of whole servers (`Gang`: `k`
consecutive servers of an aligned group when it needs `k` servers, devices of one server otherwise)
whose devices no unit above claimed, so the lower-ranked units resident there all leave that round;
blocks of different sizes nest rather than overlap, and one-device units keep off multi-device units'
devices when they can (`shapes`), since a one-GPU job's turn on a block holds the whole block up.
With `gang_patience`, a gang that has waited that many rounds in a row for its block runs on devices the
round leaves idle (`idle_runs`), which it then calls home.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any

from quanta.executor.policy.gandiva.gang import Gang
from quanta.executor.policy.gandiva.packs import Pack, Unit
from quanta.executor.policy.placement.board import Board
from quanta.executor.policy.types import TrialView


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


def home_of(u: Unit, grown_old: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...] | None:
    """The devices unit `u` is resident on and would run on without a move: a pack's running member's
    device, a grown trial's base devices (`grown_old`: last round's loans), else the trial's devices
    when they are as many as it needs; None (no home) otherwise."""
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


def loads(
    ranked: Sequence[Unit], order: Mapping[str, int], grown_old: Mapping[str, Mapping[str, Any]]
) -> dict[str, int]:
    """Units resident on each device (their home, `home_of`), the devices of `order` only."""
    out = dict.fromkeys(order, 0)
    for u in ranked:
        h = home_of(u, grown_old)
        if h and all(d in out for d in h):
            for d in h:
                out[d] += 1
    return out


def shapes(ranked: Sequence[Unit], grown_old: Mapping[str, Mapping[str, Any]]) -> tuple[set[str], set[str]]:
    """(devices some multi-device unit is resident on, devices some one-device unit is resident on): `gang`
    keeps the two apart where it can (a one-GPU job living on a multi-server job's block would hold
    the whole block up whenever its turn comes)."""
    big: set[str] = set()
    small: set[str] = set()
    for u in ranked:
        h = home_of(u, grown_old)
        if h:
            (big if len(h) > 1 else small).update(h)
    return big, small


def select_sticky(
    ranked: Sequence[Unit],
    order: Mapping[str, int],
    grown_old: Mapping[str, Mapping[str, Any]],
    load: Mapping[str, int],
    movable: Container[int] = (),
    exclusive: Container[int] = (),
    gang: Gang | None = None,
) -> tuple[list[Unit], list[Unit], dict[int, bool], dict[int, tuple[str, ...]], dict[int, int]]:
    """(selected, waiting) keeping time-sliced units on their own devices (the module docstring): in
    rank order, a unit claims its home when no unit above claimed any of it; a unit without a home
    takes `need` of the devices left; a unit whose home is claimed moves only when `need` unclaimed
    devices have a load below its home's by more than one (and devices are left), or when all its
    trials are `movable` (the starvation guard's: a new configuration reaches its first feedback
    first) or an `exclusive` trial claimed its home (it would not get a turn there while that trial
    stays exclusive); else it waits. A claim never takes the devices owed to the homeless and moving units above
    it, so a higher unit is never left out for a lower one's home: a trial is parked only when a
    higher-ranked unit claims its home or those above it fill the cluster.

    The third value names the selected units that must move (by their first trial's id): True when
    the unit claiming its home claimed exactly its devices, so that `place` may keep it where it runs
    and move the claimant instead (the same move, without a suspension), False when it must be the one
    to move (moving a claimant whose home differs would be another, larger move).

    With `gang` (knob `gang`), a multi-device unit that starts or moves claims its devices here, in
    rank order, as one aligned block (`Gang.target`: whole servers when it needs more than one, the least
    loaded block whose devices no unit above claimed): the units of lower rank resident there find
    their home claimed and leave together, and the block becomes its home, where it is time-sliced
    against them from then on. The fourth value maps those units (by first trial id) to their block;
    without `gang` it is empty.

    The fifth caps where a unit that moves for balance may go (by first trial id): onto devices carrying
    at most that many units, the load that justified the move. Placed on a busier device it would gain
    nothing, and the device it left would be the light one next round: it would move again (on the
    Philly traces most moves of sticky placement were such round trips, by two-trial packs)."""
    n_dev = len(order)
    claimed: dict[str, tuple[str, ...]] = {}  # device -> the home of the unit that claimed it
    unclaimed_by_load = Counter(load.values())  # how many unclaimed devices carry each load
    movers: dict[int, bool] = {}
    targets: dict[int, tuple[str, ...]] = {}
    caps: dict[int, int] = {}
    held: set[str] = set()  # devices claimed by exclusive trials: no turn there for the others
    owed = 0  # devices owed to the selected units without a claimed home (placed after the claims)
    selected: list[Unit] = []
    waiting: list[Unit] = []

    def claim(ds: tuple[str, ...], key: tuple[str, ...]) -> None:
        for d in ds:
            claimed[d] = key
            unclaimed_by_load[load[d]] -= 1

    for u in ranked:
        need = max(t.devices_needed for t in u)
        if need > n_dev - len(claimed) - owed:
            waiting.append(u)
            continue
        h = home_of(u, grown_old)
        if h is not None and not all(d in order for d in h):
            h = None  # a device it was on is gone: it starts afresh
        blocky = gang is not None and need > 1 and gang.applies(u)
        if h is None:
            tgt = gang.target(need, claimed, load, None, n_dev - len(claimed) - owed) if blocky and gang else None
            if tgt is not None:
                claim(tgt, ("@", *tgt))
                targets[u[0].id] = tgt
            else:
                owed += need
            selected.append(u)
        elif claimed.keys().isdisjoint(h):
            claim(h, h)
            if u[0].id in exclusive:
                held.update(h)
            selected.append(u)
        else:
            free_to_move = all(t.id in movable for t in u) or not held.isdisjoint(h)
            if blocky and gang is not None:
                # A block at least two below its home's most loaded device (one below when its home is
                # not one block: moving there also gathers it).
                limit = max(load[d] for d in h) - (2 if gang.aligned(h) else 1)
                room = n_dev - len(claimed) - owed
                light = sum(n for lo, n in unclaimed_by_load.items() if lo <= limit)  # cheap bound first
                tgt = gang.target(need, claimed, load, limit, room) if limit >= 0 and light >= need else None
                if tgt is None and free_to_move:
                    tgt = gang.target(need, claimed, load, None, room)
                if tgt is not None:
                    claim(tgt, ("@", *tgt))
                    targets[u[0].id] = tgt
                    selected.append(u)
                    continue
            limit = balance_cap(h, load)
            own = sum(1 for d in h if d not in claimed and load[d] <= limit)
            room = sum(n for lo, n in unclaimed_by_load.items() if lo <= limit) - own - owed
            if (not blocky and limit >= 0 and room >= need) or free_to_move:
                owed += need
                selected.append(u)
                movers[u[0].id] = all(claimed.get(d) == h for d in h)
                if not free_to_move:
                    caps[u[0].id] = limit
                    # It will take the `need` least loaded devices left: they carry one unit more from now
                    # on, so the units below it judge their own move against that (several units leaving
                    # one crowded home for the same light devices in one round overshoot, and move back).
                    for _ in range(need):
                        lo = min(lo for lo, n in unclaimed_by_load.items() if n > 0)
                        unclaimed_by_load[lo] -= 1
                        unclaimed_by_load[lo + 1] += 1
            else:
                waiting.append(u)
    return selected, waiting, movers, targets, caps


def place(
    board: Board,
    selected: Sequence[Unit],
    grown_old: Mapping[str, Mapping[str, Any]],
    notes: list[str],
    load: Mapping[str, int] | None = None,
    movers: Mapping[int, bool] | None = None,
    targets: Mapping[int, tuple[str, ...]] | None = None,
    avoid: Container[str] = (),
    caps: Mapping[int, int] | None = None,
) -> tuple[dict[int, tuple[str, ...]], list[Unit]]:
    """Put the selected units on the board: (devices of each placed trial, units left unplaced).
    `grown_old` is last round's grow-shrink loans (a grown trial's home is its base devices). With
    `load` (units resident per device, `loads`), a unit needing one device that cannot stay home takes
    the least loaded free device. `movers` (from `select_sticky`): units whose home a higher unit
    claimed; a running one stays where it runs (and its claimant moves) only when marked True. `targets`
    (from `select_sticky` with `gang`): units that go to the block they claimed there, placed first;
    `avoid` (with `gang`): devices of multi-device units, where one-device units go last. `caps` (from
    `select_sticky`): the highest load a balance mover's devices may carry; with none that light free,
    it stays unplaced (it waits at home)."""
    order, node_of = board.order, board.node_of
    caps = caps or {}

    def home(u: Unit) -> tuple[str, ...] | None:
        return home_of(u, grown_old)

    def spread(ds: Sequence[str]) -> bool:
        return len({node_of.get(d) for d in ds}) > 1

    # Sticky: the homes claimed by selected units (not movers, not new) are theirs; consolidating a
    # spread trial must not take them (that would only move their owners instead).
    targets = targets or {}
    claimed: set[str] = set()
    if movers is not None:
        for u in selected:
            h = home(u)
            if u[0].id in targets:
                claimed.update(targets[u[0].id])
            elif h and u[0].id not in movers:
                claimed.update(h)

    placed: dict[int, tuple[str, ...]] = {}
    todo = []
    for u in selected:
        block = targets.get(u[0].id)
        if block is None or not all(board.is_free(d) for d in block):
            todo.append(u)
            continue
        if u[0].devices and set(block) != set(u[0].devices):
            notes.append(f"trial {u[0].id} moves {','.join(u[0].devices)} -> {','.join(block)} (a block of its own)")
        for t in u:
            board.put(t.id, block)
            placed[t.id] = block
    for step in ("running", "spread", "parked", "rest"):
        left = []
        for u in todo:
            h = home(u)
            running = any(t.running for t in u)
            ds: tuple[str, ...] | None = None
            if movers is not None and not movers.get(u[0].id, True) and step in ("running", "spread"):
                pass  # it must move: its claimant takes its home first (the parked step)
            elif step == "running" and running and h and not spread(h) and all(board.is_free(d) for d in h):
                ds = h
            elif step == "spread" and running and h and spread(h):
                if movers is not None and not kind_bound(board, u):
                    ds = consolidated(board, h, claimed)
                else:
                    ds = choose(board, len(h), h, node_of, order, single_node=True, unit=u)
                if ds is not None:
                    notes.append(f"trial {u[0].id} consolidates onto node {node_of[ds[0]]}")
                elif all(board.is_free(d) for d in h):
                    ds = h
            elif step == "parked" and h and all(board.is_free(d) for d in h):
                ds = h
            elif step == "rest":
                need = max(t.devices_needed for t in u)
                if load is not None and not kind_bound(board, u):
                    ds = least_loaded(board, need, load, avoid, caps.get(u[0].id))
                else:
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


def idle_runs(
    board: Board,
    waiting: Sequence[Unit],
    patient: Container[int],
    grown_old: Mapping[str, Mapping[str, Any]],
    notes: list[str],
    load: Mapping[str, int],
) -> dict[int, tuple[str, ...]]:
    """Knob `gang_patience`: the waiting multi-device units whose first trial is `patient` (it waited its
    patience for its block) go, in rank order, onto devices the round left free, the least loaded first
    (a move, unless their home came free); returns the devices of each trial placed. Gang blocks are not
    work-conserving: without this a gang whose block another unit holds waits while devices elsewhere
    stand idle. Only devices no unit of the round claimed are taken, so nobody is displaced; the devices
    taken become the unit's home."""
    runaways = [u for u in waiting if u[0].devices_needed > 1 and u[0].id in patient]  # packs: one device
    if not runaways:
        return {}
    placed, _ = place(board, runaways, grown_old, notes, load, None, caps={})
    return placed


def move_caps(
    waiting: Sequence[Unit], load: Mapping[str, int], grown_old: Mapping[str, Mapping[str, Any]]
) -> dict[int, int]:
    """For units that wait at a home (by first trial id): the highest load a device may carry for a move
    there to balance the loads (`balance_cap`, `select_sticky`'s rule)."""
    out: dict[int, int] = {}
    for u in waiting:
        h = home_of(u, grown_old)
        if h and all(d in load for d in h):
            out[u[0].id] = balance_cap(h, load)
    return out


def balance_cap(home: Sequence[str], load: Mapping[str, int]) -> int:
    """The highest load a device may carry for a unit's move there from `home` to balance the loads: two
    below its home's most loaded device (one below would only swap the two loads)."""
    return max(load[d] for d in home) - 2


def kind_bound(board: Board, u: Unit) -> bool:
    """The kinds of the cluster restrict or order where `u` may go (`choose` defers to the board)."""
    return any(t.kind_rates for t in u) and board.tiers(u) is not None


def consolidated(board: Board, home: Sequence[str], claimed: Container[str]) -> tuple[str, ...] | None:
    """Devices of one node for a trial spread over nodes on `home`: its own devices there and free
    devices no other unit claimed (the node holding most of its devices first, then the fullest that
    fits); None when no node can hold it."""
    need, own = len(home), set(home)
    node_of = board.node_of
    best: tuple[tuple[int, int, str], list[str]] | None = None
    for node, free in board.free_by_node().items():
        ok = [d for d in free if d in own or d not in claimed]
        if len(ok) >= need:
            mine = sum(1 for d in home if node_of.get(d) == node)
            key = (-mine, len(ok), node)
            if best is None or key < best[0]:
                best = (key, sorted(ok, key=lambda d: (d not in own, board.order[d]))[:need])
    return tuple(sorted(best[1])) if best is not None else None


def least_loaded(
    board: Board, need: int, load: Mapping[str, int], avoid: Container[str] = (), cap: int | None = None
) -> tuple[str, ...] | None:
    """Free devices for a unit that cannot stay home (`select_sticky`'s movers and new units): the
    `need` least loaded free devices of one node when a node fits (the node whose pick has the lowest
    highest load, then the fullest, so large holes stay whole), else the least loaded free devices
    anywhere. None when fewer than `need` devices are free, or (with `cap`) free devices carrying at
    most `cap` units. A unit needing one device takes a device in `avoid` only when no other free device
    is as lightly loaded."""
    if need <= 0 or board.n_free < need:
        return None
    order = board.order

    def by_load(d: str) -> tuple[int, int]:
        return (load.get(d, 0), order[d])

    def light(ds: Iterable[str]) -> list[str]:
        return list(ds) if cap is None else [d for d in ds if load.get(d, 0) <= cap]

    if need == 1:
        ok = light(board.free())
        return (min(ok, key=lambda d: (load.get(d, 0), d in avoid, order[d])),) if ok else None
    best: tuple[tuple[int, int, str], list[str]] | None = None
    for node, ds in board.free_by_node().items():
        ok = light(ds)
        if len(ok) >= need:
            pick = sorted(ok, key=by_load)[:need]
            key = (max(load.get(d, 0) for d in pick), len(ds), node)
            if best is None or key < best[0]:
                best = (key, pick)
    if best is not None:
        return tuple(sorted(best[1]))
    anywhere = light(board.free())
    return tuple(sorted(sorted(anywhere, key=by_load)[:need])) if len(anywhere) >= need else None


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
