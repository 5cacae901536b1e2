"""The spec's search space, validated and compiled to a HyperOpt space.

A space maps parameter names to dimensions or constants. A dimension is a one-key mapping:

    uniform: [low, high]            loguniform: [low, high]  (0 < low < high)
    quniform: [low, high, q]        qloguniform: [low, high, q]
    normal: [mu, sigma]             randint: [low, high]     (integers low <= x < high)
    choice: [option, ...]           an option is a constant or a mapping (a nested space)

`validate_space` raises `SpaceError` naming the offending path (``space.optimizer.choice[0].momentum``);
`compile_space` returns the HyperOpt expression whose `space_eval` gives the nested configuration.
Pure: no devices, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hyperopt import hp

KINDS = ("uniform", "loguniform", "quniform", "qloguniform", "normal", "randint", "choice")
_ARITY = {"uniform": 2, "loguniform": 2, "quniform": 3, "qloguniform": 3, "normal": 2, "randint": 2}
_CONSTANTS = (str, int, float, bool, type(None))


class SpaceError(ValueError):
    """A bad space entry: `path` is the dotted field path, `reason` says what is wrong."""

    def __init__(self, path: str, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def is_dimension(node: Any) -> bool:
    """A one-key mapping whose key is a distribution kind."""
    return isinstance(node, Mapping) and len(node) == 1 and next(iter(node)) in KINDS


def _check_numbers(path: str, kind: str, args: Any) -> list[float]:
    n = _ARITY[kind]
    if not isinstance(args, list | tuple) or len(args) != n:
        names = {2: "[low, high]", 3: "[low, high, q]"}[n] if kind != "normal" else "[mu, sigma]"
        raise SpaceError(path, f"{kind} takes {names}")
    if not all(isinstance(a, int | float) and not isinstance(a, bool) for a in args):
        raise SpaceError(path, f"{kind} arguments must be numbers")
    if not all(math.isfinite(a) for a in args):
        raise SpaceError(path, f"{kind} arguments must be finite")
    vals = [float(a) for a in args]
    if kind == "normal":
        if vals[1] <= 0:
            raise SpaceError(path, "normal needs sigma > 0")
        return vals
    low, high = vals[0], vals[1]
    if not low < high:
        raise SpaceError(path, f"{kind} needs low < high")
    if kind in ("loguniform", "qloguniform") and low <= 0:
        raise SpaceError(path, f"{kind} needs 0 < low")
    if kind in ("quniform", "qloguniform") and vals[2] <= 0:
        raise SpaceError(path, f"{kind} needs q > 0")
    if kind == "randint" and not all(float(a).is_integer() for a in args):
        raise SpaceError(path, "randint bounds must be integers")
    return vals


def _walk(node: Any, path: str) -> None:
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        if kind == "choice":
            if not isinstance(args, list | tuple) or not args:
                raise SpaceError(path, "choice takes a non-empty list of options")
            for i, option in enumerate(args):
                _walk(option, f"{path}.choice[{i}]")
        else:
            _check_numbers(f"{path}.{kind}", kind, args)
        return
    if isinstance(node, Mapping):
        for key, value in node.items():
            if not isinstance(key, str) or not key:
                raise SpaceError(path, "parameter names must be non-empty strings")
            # A one-key mapping to a list is meant as a dimension: a typo'd kind, not a nested space.
            if isinstance(value, Mapping) and len(value) == 1 and not is_dimension(value):
                ((kind, args),) = value.items()
                if isinstance(args, list | tuple):
                    raise SpaceError(f"{path}.{key}", f"unknown kind '{kind}' (kinds: {', '.join(KINDS)})")
            _walk(value, f"{path}.{key}")
        return
    if isinstance(node, list | tuple):
        raise SpaceError(path, f"a list is not a dimension; use one of: {', '.join(KINDS)}")
    if not isinstance(node, _CONSTANTS):
        raise SpaceError(path, f"unsupported value of type {type(node).__name__}")


def validate_space(space: Mapping[str, Any], root: str = "space") -> None:
    """Raise `SpaceError` at the first bad entry; return None when the space is valid."""
    if not isinstance(space, Mapping):
        raise SpaceError(root, "must be a mapping of parameter names to dimensions")
    _walk(space, root)
    _unique_labels(space, "", root, {})


def _unique_labels(node: Any, label: str, path: str, seen: dict[str, str]) -> None:
    """HyperOpt names each dimension by its label (`_compile`'s scheme: keys joined by '/', choice
    options by index); two dimensions with one label make HyperOpt refuse the whole space when a search
    starts. Refused here instead, naming the second path (e.g. a key `a/b` beside a nested `a: {b: ...}`)."""
    if is_dimension(node):
        if label in seen:
            raise SpaceError(path, f"its HyperOpt label '{label}' is also the label of {seen[label]}")
        seen[label] = path
        kind, args = next(iter(node.items()))
        if kind == "choice":
            for i, opt in enumerate(args):
                _unique_labels(opt, f"{label}/{i}", f"{path}.choice[{i}]", seen)
    elif isinstance(node, Mapping):
        prefix = f"{label}/" if label else ""
        for key, value in node.items():
            _unique_labels(value, f"{prefix}{key}", f"{path}.{key}", seen)


def _compile(node: Any, label: str) -> Any:
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        if kind == "choice":
            return hp.choice(label, [_compile(opt, f"{label}/{i}") for i, opt in enumerate(args)])
        if kind == "uniform":
            return hp.uniform(label, args[0], args[1])
        if kind == "loguniform":
            return hp.loguniform(label, math.log(args[0]), math.log(args[1]))
        if kind == "quniform":
            return hp.quniform(label, args[0], args[1], args[2])
        if kind == "qloguniform":
            return hp.qloguniform(label, math.log(args[0]), math.log(args[1]), args[2])
        if kind == "normal":
            return hp.normal(label, args[0], args[1])
        if kind == "randint":
            return hp.randint(label, int(args[0]), int(args[1]))
    if isinstance(node, Mapping):
        prefix = f"{label}/" if label else ""
        return {key: _compile(value, f"{prefix}{key}") for key, value in node.items()}
    return node


def compile_space(space: Mapping[str, Any]) -> dict[str, Any]:
    """Validate and compile to a HyperOpt space (a dict of hp expressions and constants)."""
    validate_space(space)
    compiled: dict[str, Any] = _compile(space, "")
    return compiled
