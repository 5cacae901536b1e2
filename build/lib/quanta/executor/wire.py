"""Wire formats: the values that cross a process or machine boundary as JSON (Celery task arguments,
the rows node agents write for the controller), each declared once as a dataclass and encoded and
decoded one way on both sides.

A dataclass that subclasses `Wire` gets `to_dict()` and `from_dict()`, driven by its fields'
annotations: tuples travel as JSON lists, nested `Wire` values as objects. `from_dict` checks every
field and raises `WireError` naming the type and the field (``NodeResidency.steps: expected int, got
'x'``); a missing field takes its default, a missing field without one or an unknown field is an
error. Annotations understood: int, float (an int is accepted), str, bool, None, `X | None`,
`tuple[X, ...]`, `dict[str, X]`, `Any` (passed as is) and `Wire` types.

The records of distributed mode that need no action or event types live here too: a node's devices
(`NodeDevice`) and resident trials (`NodeResidency`) as its row stores them, `NodeInfo`, `EventRecord`
and `Assignment`. Actions (with the node's `Order` envelope) and events are in `quanta.executor.actions`.
This module is ground floor: it imports nothing from `quanta`, so the database layer (`quanta.db.cluster`)
and the runtime layer (`quanta.executor.runtime`) both use it without importing each other.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self


class WireError(ValueError):
    """A payload does not fit its wire format. The message names the type and the field."""


class Wire:
    """Mixin for frozen dataclasses that cross the wire: one `to_dict` / `from_dict` pair each."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields (tuples as lists)."""
        out = {}
        for name, enc, _ in _plan(type(self)):
            value = getattr(self, name)
            out[name] = value if enc is None else enc(value)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """The value back from `to_dict`'s output (after JSON). Raises `WireError` naming the field."""
        return _decode_dataclass(cls, data, cls.__name__)


Decoder = Callable[[Any, str], Any]  # (value, field path) -> decoded value; raises WireError
Encoder = Callable[[Any], Any]


Plan = tuple[tuple[str, Encoder | None, Decoder], ...]
_PLANS: dict[type, Plan] = {}


def _plan(cls: type) -> Plan:
    """Per field of a wire dataclass: its name, how to encode it (None: as is) and how to decode it,
    compiled once per type from the annotations (`to_dict` and `from_dict` run per message)."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = tuple((f.name, _encoder(hints[f.name]), _decoder(hints[f.name])) for f in dataclasses.fields(cls))
        _PLANS[cls] = plan
    return plan


def _encoder(tp: Any) -> Encoder | None:
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        return _encode if any(_encoder(t) is not None for t in typing.get_args(tp)) else None
    if origin is tuple:
        item = _encoder(typing.get_args(tp)[0])
        return list if item is None else (lambda v: [item(x) for x in v])
    if origin is dict or tp is Any or (isinstance(tp, type) and issubclass(tp, Wire)):
        return _encode
    return None


def _encode(value: Any) -> Any:
    if isinstance(value, Wire):
        return value.to_dict()
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode_dataclass(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, Mapping):
        raise WireError(f"{path}: expected an object, got {data!r}")
    plan = _plan(cls)
    kwargs = {}
    for name, _enc, dec in plan:
        if name in data:
            kwargs[name] = dec(data[name], f"{path}.{name}")
    if len(kwargs) != len(data):
        unknown = sorted(set(data) - {name for name, _e, _d in plan})
        raise WireError(f"{path}: unknown field {unknown[0]!r}")
    try:
        return cls(**kwargs)
    except TypeError:  # a field without a default is missing
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in kwargs and _required(f)]
        if not missing:
            raise
        raise WireError(f"{path}.{missing[0]}: missing") from None


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _decoder(tp: Any) -> Decoder:
    if tp is Any:
        return lambda v, path: v
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        options = typing.get_args(tp)
        nullable = type(None) in options
        decoders = [_decoder(t) for t in options if t is not type(None)]

        def union(v: Any, path: str) -> Any:
            if v is None and nullable:
                return None
            errors = []
            for dec in decoders:
                try:
                    return dec(v, path)
                except WireError as exc:
                    errors.append(str(exc))
            raise WireError(errors[0] if len(errors) == 1 else f"{path}: expected {_name(tp)}, got {v!r}")

        return union
    if origin is tuple:
        item = _decoder(typing.get_args(tp)[0])

        def seq(v: Any, path: str) -> tuple[Any, ...]:
            if not isinstance(v, list | tuple):
                raise WireError(f"{path}: expected a list, got {v!r}")
            return tuple(item(x, f"{path}[{i}]") for i, x in enumerate(v))

        return seq
    if origin is dict:
        value = _decoder(typing.get_args(tp)[1])

        def mapping(v: Any, path: str) -> dict[str, Any]:
            if not isinstance(v, Mapping):
                raise WireError(f"{path}: expected an object, got {v!r}")
            return {str(k): value(x, f"{path}[{k!r}]") for k, x in v.items()}

        return mapping
    if isinstance(tp, type) and issubclass(tp, Wire):
        return lambda v, path: _decode_dataclass(tp, v, path)
    if tp is float:

        def real(v: Any, path: str) -> float:
            if isinstance(v, int | float) and not isinstance(v, bool):
                return float(v)
            raise WireError(f"{path}: expected float, got {v!r}")

        return real
    if tp in (int, str, bool, type(None)):

        def exact(v: Any, path: str) -> Any:
            if isinstance(v, tp) and not (tp is int and isinstance(v, bool)):  # a str enum is a str
                return v
            raise WireError(f"{path}: expected {_name(tp)}, got {v!r}")

        return exact
    raise TypeError(f"no wire decoding for {tp!r}")  # a programming error in a wire type, not a bad payload


def _name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp)


# ---- distributed mode's node records ------------------------------------------------------------


@dataclass(frozen=True)
class NodeDevice(Wire):
    """A device a node offers, as its row stores it. `id` is the cluster id (`n1/cpu:0`)."""

    id: str
    kind: str = "cpu"
    memory_mb: float = 0.0


@dataclass(frozen=True)
class NodeResidency(Wire):
    """One trial process resident on a node, as the node's heartbeat writes it: where it is (cluster
    device ids), whether it computes, its progress, the assignment epoch it started under and the
    last round the node applied for it (how the controller knows its actions arrived)."""

    devices: tuple[str, ...]
    running: bool
    steps: int = 0
    device_seconds: float = 0.0
    elastic: bool = False
    epoch: int = 0
    round: int = 0
    pid: int | None = None


def residency_to_json(residency: Mapping[int, NodeResidency]) -> dict[str, dict[str, Any]]:
    """A node's resident trials as its row stores them (JSON objects have string keys)."""
    return {str(tid): r.to_dict() for tid, r in residency.items()}


def residency_from_json(data: Any) -> dict[int, NodeResidency]:
    """The inverse of `residency_to_json`; raises `WireError` naming the bad trial or field."""
    if not isinstance(data, Mapping):
        raise WireError(f"residency: expected an object, got {data!r}")
    out = {}
    for key, value in data.items():
        try:
            out[int(key)] = NodeResidency.from_dict(value)
        except (TypeError, ValueError) as exc:  # WireError is a ValueError; int() raises either
            raise WireError(f"residency[{key!r}]: {exc}") from None
    return out


@dataclass(frozen=True)
class NodeInfo:
    """A node as registered in the database. `beat` grows with every heartbeat; `residency` maps trial
    id to its resident process; `seq` is the last event number written."""

    name: str
    incarnation: str
    devices: tuple[NodeDevice, ...]
    beat: int
    heartbeat_at: float  # the node's wall clock: informative only (liveness is judged by `beat` changes)
    residency: dict[int, NodeResidency] = field(default_factory=dict)
    seq: int = 0
    status: str = "up"  # up | dead (as the controller judged) | left (stopped cleanly)


@dataclass(frozen=True)
class EventRecord:
    """One event row: the node's `seq`-th event, made by the trial's process of assignment `epoch`.
    `data` is the event's `to_dict()` (decode it with `quanta.executor.actions.decode_event(kind, data)`)."""

    node: str
    seq: int
    epoch: int
    trial_id: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Assignment:
    """Which node may run a trial's process, and the epoch of that assignment. A Run that starts a
    new process, or moves the trial to another node, increments the epoch; a node runs a trial only
    while the database names it with the epoch its process started under (fencing)."""

    trial_id: int
    node: str
    epoch: int
