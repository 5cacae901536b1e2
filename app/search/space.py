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
    # HyperOpt (and the SciPy it imports: over half a second) is imported when a space is compiled, not
    # with this module: the spec validates spaces here, and a spec's error must not wait for HyperOpt.
    from hyperopt import hp

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


# ---- points given by users (warm start) -------------------------------------------------------------


def _same_constant(a: Any, b: Any) -> bool:
    """Equal as a user means it: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


def _point_number(kind: str, args: Any, value: Any, path: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpaceError(path, f"must be a finite number ({kind}), not {value!r}")
    if kind == "normal":
        return float(value)
    low, high = float(args[0]), float(args[1])
    if kind == "randint":
        if not float(value).is_integer() or not low <= value < high:
            raise SpaceError(path, f"{value!r} is not an integer in [{int(low)}, {int(high)})")
        return int(value)
    if kind in ("quniform", "qloguniform"):
        q = float(args[2])  # HyperOpt rounds to multiples of q: the ends may round outwards
        low, high = min(low, round(low / q) * q), max(high, round(high / q) * q)
    if not low <= value <= high:
        raise SpaceError(path, f"{value!r} is outside [{args[0]}, {args[1]}] ({kind})")
    return float(value)


def _point(node: Any, value: Any, label: str, path: str, vals: dict[str, list[Any]]) -> None:
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        if kind != "choice":
            vals[label] = [_point_number(kind, args, value, path)]
            return
        reasons = []
        for i, option in enumerate(args):
            sub: dict[str, list[Any]] = {}
            try:
                _point(option, value, f"{label}/{i}", path, sub)
            except SpaceError as exc:
                reasons.append(f"option {i}: {exc.reason}" if isinstance(option, Mapping) else repr(option))
                continue
            vals[label] = [i]
            vals.update(sub)
            return
        if all(not isinstance(o, Mapping) for o in args):
            raise SpaceError(path, f"{value!r} is not one of the choices [{', '.join(reasons)}]")
        raise SpaceError(path, f"matches none of the choices ({'; '.join(reasons)})")
    if isinstance(node, Mapping):
        if not isinstance(value, Mapping):
            raise SpaceError(path, f"must be a mapping of parameters, not {value!r}")
        unknown = [k for k in value if k not in node]
        if unknown:
            raise SpaceError(f"{path}.{unknown[0]}", "is not a parameter of the space")
        prefix = f"{label}/" if label else ""
        for key, sub_node in node.items():
            if key not in value:
                if _has_dimension(sub_node):
                    raise SpaceError(f"{path}.{key}", "missing: a point gives every parameter of the space")
                continue  # a constant of the space: implied
            _point(sub_node, value[key], f"{prefix}{key}", f"{path}.{key}", vals)
        return
    if not _same_constant(node, value):
        raise SpaceError(path, f"must be {node!r} (a constant of the space), not {value!r}")


def _has_dimension(node: Any) -> bool:
    if is_dimension(node):
        return True
    return isinstance(node, Mapping) and any(_has_dimension(v) for v in node.values())


def point_vals(space: Mapping[str, Any], point: Any, root: str = "point") -> dict[str, list[Any]]:
    """The searcher's flat record (``{label: [value]}``, as in `Suggestion.vals`; a choice by its
    option's index) of a configuration a user gives, e.g. ``{"lr": 0.01, "optimizer": {"name": "adam"}}``.

    A point gives every parameter of the (valid) `space` (constants may be left out); each value lies
    in its dimension. Raises `SpaceError` naming the offending path under `root` otherwise
    (``search.points_to_evaluate[0].lr: 2.0 is outside [0.0001, 0.1] (loguniform)``)."""
    vals: dict[str, list[Any]] = {}
    _point(space, point, "", root, vals)
    return vals


def _describe(node: Any) -> str:
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        return f"{kind} {list(args)!r}" if kind != "choice" else f"choice of {len(args)}"
    if isinstance(node, Mapping):
        return "a nested space"
    return f"the constant {node!r}"


def space_difference(ours: Any, theirs: Any, path: str = "space") -> str | None:
    """None when two spaces are the same (parameter names, kinds and bounds; key order aside), else where
    and how they first differ: ``space.lr: loguniform [0.0001, 0.1] here, uniform [0, 1] there``.
    Numbers compare by value (``1 == 1.0``)."""
    if is_dimension(ours) and is_dimension(theirs):
        (k1, a1), (k2, a2) = next(iter(ours.items())), next(iter(theirs.items()))
        if k1 != k2:
            return f"{path}: {_describe(ours)} here, {_describe(theirs)} there"
        if k1 == "choice":
            if len(a1) != len(a2):
                return f"{path}: a choice of {len(a1)} options here, of {len(a2)} there"
            for i, (x, y) in enumerate(zip(a1, a2, strict=True)):
                found = space_difference(x, y, f"{path}.choice[{i}]")
                if found:
                    return found
            return None
        if len(a1) != len(a2) or not all(_same_constant(x, y) for x, y in zip(a1, a2, strict=False)):
            return f"{path}: {_describe(ours)} here, {_describe(theirs)} there"
        return None
    if (
        isinstance(ours, Mapping)
        and isinstance(theirs, Mapping)
        and not is_dimension(ours)
        and not is_dimension(theirs)
    ):
        for key in ours:
            if key not in theirs:
                return f"{path}.{key}: a parameter here, absent there"
        for key in theirs:
            if key not in ours:
                return f"{path}.{key}: absent here, a parameter there"
        for key in ours:
            found = space_difference(ours[key], theirs[key], f"{path}.{key}")
            if found:
                return found
        return None
    if is_dimension(ours) or is_dimension(theirs) or isinstance(ours, Mapping) or isinstance(theirs, Mapping):
        return f"{path}: {_describe(ours)} here, {_describe(theirs)} there"
    return None if _same_constant(ours, theirs) else f"{path}: {_describe(ours)} here, {_describe(theirs)} there"


# ---- mutable parameters (forks, population-based training) --------------------------------------

MUTABLE = "mutable"  # the flag a dimension may carry beside its kind: `lr: {loguniform: [...], mutable: true}`
NUMERIC_KINDS = tuple(k for k in KINDS if k != "choice")


def take_mutable(space: Mapping[str, Any], root: str = "space") -> tuple[dict[str, Any], list[str]]:
    """`space` without the `mutable` flags its dimensions carry, and the dotted names of the parameters
    flagged `mutable: true` (in the space's order). A flag is a dimension's second key
    (``{loguniform: [0.0001, 0.1], mutable: true}``); it may stand on a parameter of the space or of a
    nested space (``optimizer.lr``), never inside a choice's option (a parameter there exists in some
    configurations only). Raises `SpaceError` naming the parameter for a flag that is not a boolean or
    stands inside a choice. What is not a flagged dimension is returned as it is (`validate_space`
    judges it)."""
    names: list[str] = []
    return _take(space, "", root, names, inside_choice=False), names


def _take(node: Any, name: str, path: str, names: list[str], *, inside_choice: bool) -> Any:
    if isinstance(node, Mapping) and MUTABLE in node and len(node) == 2:
        flag = node[MUTABLE]
        rest = {k: v for k, v in node.items() if k != MUTABLE}
        if is_dimension(rest):
            if not isinstance(flag, bool):
                raise SpaceError(f"{path}.{MUTABLE}", f"must be true or false, not {flag!r}")
            if flag and inside_choice:
                raise SpaceError(path, "mutable: true cannot stand inside a choice's option")
            if flag:
                names.append(name)
            node = rest
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        if kind == "choice" and isinstance(args, list | tuple):
            options = [
                _take(o, f"{name}/{i}", f"{path}.choice[{i}]", names, inside_choice=True) for i, o in enumerate(args)
            ]
            return {kind: options}
        return dict(node)
    if isinstance(node, Mapping):
        return {
            k: _take(v, f"{name}.{k}" if name else str(k), f"{path}.{k}", names, inside_choice=inside_choice)
            for k, v in node.items()
        }
    return node


def dimension_at(space: Mapping[str, Any], name: str) -> Any:
    """What the dotted parameter `name` (``optimizer.lr``) names in `space` through nested spaces (not
    into choices): a dimension, a constant or a nested space; None when it names nothing."""
    node: Any = space
    for part in name.split("."):
        if not isinstance(node, Mapping) or is_dimension(node) or part not in node:
            return None
        node = node[part]
    return node


def mutable_problem(space: Mapping[str, Any], names: Any, root: str = "mutable") -> SpaceError | None:
    """None when every name in `names` is a numeric dimension of `space` (a valid space), else the
    `SpaceError` naming the first that is not: a choice, a constant or a nested space cannot change
    at a boundary the way a number does (the parameter's path under `space`), and a name the space
    lacks (its place under `root`)."""
    for i, name in enumerate(names):
        node = dimension_at(space, name)
        if node is None:
            return SpaceError(f"{root}[{i}]", f"{name!r} is not a parameter of the space")
        if is_dimension(node) and next(iter(node)) in NUMERIC_KINDS:
            continue
        what = "a choice" if is_dimension(node) else "a nested space" if isinstance(node, Mapping) else "a constant"
        return SpaceError(
            f"space.{name}",
            f"mutable: true needs a numeric parameter ({', '.join(NUMERIC_KINDS)}), not {what}",
        )
    return None


def override_value(space: Mapping[str, Any], name: str, value: Any, path: str) -> int | float:
    """`value` as a new value of the numeric dimension `name` of `space` (a mutable one): an int for
    `randint`, a float otherwise. Raises `SpaceError` at `path` when it is not a finite number, not an
    integer for `randint`, or not above 0 for a log-scale dimension. It may lie outside the dimension's
    range: a fork's or a population's value is a decision made on a trial's curve, not a draw from the
    prior."""
    node = dimension_at(space, name)
    kind = next(iter(node)) if is_dimension(node) else None
    if kind not in NUMERIC_KINDS:
        raise SpaceError(path, f"{name!r} is not a numeric parameter of the space")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpaceError(path, f"must be a finite number ({kind}), not {value!r}")
    if kind == "randint":
        if not float(value).is_integer():
            raise SpaceError(path, f"must be an integer (randint), not {value!r}")
        return int(value)
    if kind in ("loguniform", "qloguniform") and value <= 0:
        raise SpaceError(path, f"must be above 0 ({kind}), not {value!r}")
    return float(value)


def with_values(params: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the configuration `params` with each dotted name of `values` set (nested spaces are
    nested mappings: `optimizer.lr` is ``params["optimizer"]["lr"]``); `params` is left as it is."""
    out = _copy_tree(params)
    for name, value in values.items():
        set_dotted(out, name, value)
    return out


def set_dotted(config: dict[str, Any], name: str, value: Any) -> None:
    """Set dotted `name` in the nested configuration `config` (in place) to `value`, making the levels
    that are missing (a level that is not a mapping is replaced by one)."""
    node = config
    *parents, last = name.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def _copy_tree(node: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy_tree(v) if isinstance(v, Mapping) else v for k, v in node.items()}


def vals_with_values(vals: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """The searcher's flat record (`{label: [value]}`, labels joined by '/') with each dotted name of
    `values` set, as `with_values` sets the configuration."""
    out = {label: list(v) if isinstance(v, list | tuple) else v for label, v in vals.items()}
    for name, value in values.items():
        out[name.replace(".", "/")] = [value]
    return out
