"""The spec reference (`docs/spec.md`), written from the pydantic schema so that it cannot drift.

`render()` walks `SearchSpec` (app/spec/model.py) and the blocks it holds: the searcher's (app/search/knobs.py)
and each policy's knobs in the `scheduler` union (app/executor/policy/knobs.py), and writes one table
per block: every field with its dotted path, type, default, bounds and description. Experimental blocks
are marked; removed knobs (accepted only at their old default, so stored specs still load) are listed
with why they went. tests/unit/test_spec_reference.py checks that the committed page equals `render()`
and that every field of the schema is on it.

    python -m quanta.spec_reference --write docs/spec.md     # regenerate after changing the schema
    python -m quanta.spec_reference --check docs/spec.md     # exit 1 when the page is out of date
"""

from __future__ import annotations

import argparse
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from quanta.executor.policy.knobs import (
    _RETIRED_RULES,
    ASHA_RETIRED,
    DEFAULT_POLICY,
    KNOBS,
    GandivaExperimental,
    MechanismKnobs,
)
from quanta.search import space as space_module
from quanta.search.knobs import SEARCH_RETIRED, Retired
from quanta.spec import MAX_DEPTH, MAX_OPTIONS, MAX_PARAMETERS, SearchSpec

COMMAND = "python -m quanta.spec_reference --write docs/spec.md"

# Blocks whose own section comes later (the top-level table says "block" for them).
_SCHEDULER = "scheduler"
_EXPERIMENTAL_BLOCKS: tuple[type[BaseModel], ...] = (GandivaExperimental,)


def _escape(text: str) -> str:
    """Text safe inside a Markdown table cell (one line, pipes escaped)."""
    return " ".join(text.split()).replace("|", "\\|")


def type_text(annotation: Any) -> str:
    """A field's type as a reader of YAML thinks of it: `int`, `float or null`, `` `pause` or `kill` ``,
    `list of mapping`, `block` for a nested model."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is Annotated:
        return type_text(args[0])
    if origin is Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        if all(inspect.isclass(a) and issubclass(a, BaseModel) for a in args):
            return "block (one per policy)"
        return " or ".join(type_text(a) for a in args)
    if origin in (list, tuple):
        if origin is tuple and len(args) == 2 and args[1] is not Ellipsis:
            return f"pair of {type_text(args[0])}"
        item = type_text(args[0]) if args else "any"
        return f"list of {item}"
    if origin is dict:
        return "mapping"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return "block"
    if annotation is Any:
        return "any"
    return getattr(annotation, "__name__", str(annotation))


def _value_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    if isinstance(value, BaseModel):
        return "its defaults"
    return str(value)


def default_text(field: FieldInfo) -> str:
    """The default as YAML would write it; `required` when there is none."""
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        policy = getattr(value, "policy", None)
        if isinstance(value, BaseModel) and isinstance(policy, str):
            return f"policy `{policy}`"
        return f"`{_value_text(value)}`"
    return f"`{_value_text(field.default)}`"


def bounds_text(field: FieldInfo) -> str:
    """The numeric and length bounds pydantic enforces (`>= 1, <= 100000`); empty when none."""
    parts = []
    for m in field.metadata:
        if isinstance(m, at.Gt):
            parts.append(f"> {_value_text(m.gt)}")
        elif isinstance(m, at.Ge):
            parts.append(f">= {_value_text(m.ge)}")
        elif isinstance(m, at.Lt):
            parts.append(f"< {_value_text(m.lt)}")
        elif isinstance(m, at.Le):
            parts.append(f"<= {_value_text(m.le)}")
        elif isinstance(m, at.MinLen):
            parts.append(f"length >= {m.min_length}")
        elif isinstance(m, at.MaxLen):
            parts.append(f"length <= {m.max_length}")
    return ", ".join(parts)


def own_fields(model: type[BaseModel], skip: type[BaseModel] | None = None) -> Iterator[tuple[str, FieldInfo]]:
    """The fields of `model` in declaration order, those of `skip` (a base whose table comes earlier) left
    out, and `policy` left out (its section names it)."""
    for name, field in model.model_fields.items():
        if skip is not None and name in skip.model_fields:
            continue
        if name == "policy":
            continue
        yield name, field


def table(model: type[BaseModel], prefix: str, skip: type[BaseModel] | None = None) -> list[str]:
    """One Markdown table: a row per field of `model` (dotted under `prefix`)."""
    lines = ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for name, field in own_fields(model, skip):
        path = f"{prefix}.{name}" if prefix else name
        lines.append(
            f"| `{path}` | {_escape(type_text(field.annotation))} | {_escape(default_text(field))} | "
            f"{_escape(bounds_text(field))} | {_escape(field.description or '')} |"
        )
    return lines


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field holds: its type, or the models of a union such as `Block | None`."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, types.UnionType):
        return [m for a in get_args(annotation) for m in nested_models(a)]
    return []


def block_section(model: type[BaseModel], path: str, level: str) -> list[str]:
    """A block's heading, docstring and table, then a section for each block it holds, one level down."""
    out = [f"{level} `{path}`", ""]
    if model.__doc__:
        out += [_doc(model), ""]
    out += [*table(model, path), ""]
    for name, field in model.model_fields.items():
        for sub in nested_models(field.annotation):
            out += block_section(sub, f"{path}.{name}", level + "#")
    return out


def _doc(obj: Any) -> str:
    """An object's docstring as one paragraph."""
    doc = inspect.getdoc(obj)
    return " ".join(doc.split()) if doc else ""


def _retired_rows(block: str, retired: dict[str, Retired]) -> list[str]:
    return [f"| `{block}.{name}` | `{_value_text(r.default)}` | {_escape(r.why)} |" for name, r in retired.items()]


def _space_section() -> list[str]:
    # The kinds and their arguments are declared in app/search/space.py; its docstring shows them.
    doc = inspect.getdoc(space_module) or ""
    block = [line for line in doc.splitlines() if line.startswith("    ")]
    return [
        "## `space`",
        "",
        "A mapping of parameter names to dimensions or constants (a constant is passed as it is). A dimension "
        f"is a one-key mapping; its kinds ({', '.join(f'`{k}`' for k in space_module.KINDS)}):",
        "",
        "```",
        *[line[4:] for line in block],
        "```",
        "",
        "Options of a `choice` may be nested spaces: `optimizer: {choice: [{name: sgd, momentum: {uniform: "
        "[0.0, 0.99]}}, {name: adam}]}`. A bad entry is refused with its path "
        "(`space.optimizer.choice[0].momentum: unknown kind 'unifrom'`).",
        "",
        "A numeric dimension (any kind but `choice`) may carry `mutable: true` beside its kind: "
        "`lr: {loguniform: [0.0001, 0.1], mutable: true}`. A fork may give such a parameter a new value "
        "(`POST /trials/{id}/fork`, `quanta fork TRIAL --set lr=0.001`, see docs/forking.md). The flag is "
        "stored in the top-level `mutable` list, which may also be written directly; on a `choice`, a "
        "constant or inside a choice's option it is refused with the parameter's path.",
        "",
        f"A space has at most {MAX_PARAMETERS} parameters (every named entry, nested ones included) and "
        f"{MAX_OPTIONS:,} `choice` options in all, and a parameter's name has no `.` (nested names are "
        f"joined by dots: `optimizer.momentum`). A spec nests at most {MAX_DEPTH} levels of mappings and "
        "lists (the spec itself is the first).",
        "",
    ]


def render() -> str:
    """The whole page, as committed in docs/spec.md."""
    top = SearchSpec.model_fields
    blocks = [
        (name, field.annotation)
        for name, field in top.items()
        if inspect.isclass(field.annotation) and issubclass(field.annotation, BaseModel)
    ]
    out = [
        "# Spec reference",
        "",
        f"<!-- Generated from the pydantic schema by `{COMMAND}`. Do not edit: change the schema "
        "(app/spec/, app/search/knobs.py, app/executor/policy/knobs.py) and regenerate. -->",
        "",
        "A search spec is a YAML or JSON mapping (`quanta run spec.yaml`, `quanta submit`, `POST "
        "/api/v1/searches`, `quanta.sdk.run`). Every block refuses fields it does not have, naming them "
        "(`scheduler.kill_treshold: Extra inputs are not permitted`), and a bad value is refused with its "
        "dotted path and the reason; nothing is stored then. Below: every field, its type, its default, "
        "the bounds it is checked against, and what it does.",
        "",
        "## Top level",
        "",
        _doc(SearchSpec) if SearchSpec.__doc__ else "",
        *table(SearchSpec, ""),
        "",
    ]
    out = [line for i, line in enumerate(out) if not (line == "" and i > 0 and out[i - 1] == "")]
    for name, model in blocks:
        out += block_section(model, name, "##")
    out += _space_section()
    out += [
        f"## `{_SCHEDULER}`",
        "",
        f"Which policy schedules the trials (`{_SCHEDULER}.policy`, default `{DEFAULT_POLICY}`) and that policy's "
        "knobs: a block may only hold the knobs of the policy it names "
        f"(`{_SCHEDULER}.top_m: Extra inputs are not permitted` under `fifo`). The policies: "
        + ", ".join(f"`{p}`" for p in KNOBS)
        + ".",
        "",
        "### Every policy",
        "",
        _doc(MechanismKnobs),
        "",
        *table(MechanismKnobs, _SCHEDULER),
        "",
    ]
    for policy, model in KNOBS.items():
        default = " (the default)" if policy == DEFAULT_POLICY else ""
        out += [f"### `policy: {policy}`{default}", ""]
        if model.__doc__ and model.__doc__ != MechanismKnobs.__doc__:
            out += [_doc(model), ""]
        rows = table(model, _SCHEDULER, skip=MechanismKnobs)
        if len(rows) > 2:
            out += ["Besides every policy's knobs:", "", *rows, ""]
        else:
            out += ["Every policy's knobs only.", ""]
        for name, field in own_fields(model, MechanismKnobs):
            sub = field.annotation
            for exp in _EXPERIMENTAL_BLOCKS:
                if sub == exp or exp in get_args(sub):
                    out += [
                        f"#### `{_SCHEDULER}.{name}` (experimental, {policy})",
                        "",
                        f"**Experimental**: {_doc(exp)} Setting any of them logs a warning; they may change or go.",
                        "",
                        *table(exp, f"{_SCHEDULER}.{name}"),
                        "",
                    ]
    out += [
        "## Removed knobs",
        "",
        "Knobs that lost their measurements were removed. A spec that still gives one at its old default "
        "(specs stored before it went) loads unchanged; any other value is refused, naming the knob.",
        "",
        "| field | accepted only as | why it went |",
        "|---|---|---|",
        *_retired_rows("search", SEARCH_RETIRED),
        *_retired_rows(_SCHEDULER, ASHA_RETIRED),
        *[
            f"| `{_SCHEDULER}.rule: {rule}` | `rent` (kill mode only) | {_escape(why)} |"
            for rule, why in _RETIRED_RULES.items()
        ],
        "",
    ]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quanta.spec_reference", description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, metavar="PATH", help="write the page here")
    group.add_argument("--check", type=Path, metavar="PATH", help="exit 1 when PATH differs from the schema")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        args.write.write_text(text)
    elif args.check:
        if not args.check.exists() or args.check.read_text() != text:
            print(f"{args.check} is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
