"""How big a spec may be before it is validated field by field: how deeply it nests (`nesting_problem`)
and how wide its search space is (`space_width_check`: parameters, choice options, dotted names). Both
run on plain data, so a hostile document is refused before pydantic or the searcher spends time on it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quanta.search.space import SpaceError, is_dimension
from quanta.spec.errors import field_path

# How deeply a spec may nest (mappings and lists, from the spec itself at level 1). A real spec nests a
# handful of levels; JSON encoders and pydantic's serializer give up at a few hundred, so a deeper spec
# stored once would break every page that shows it.
MAX_DEPTH = 32
# How wide a search space may be: the searcher is built and asked in time proportional to it (TPE on
# 256 parameters: about 0.1 s to build, 0.1 s per ask after a few dozen trials; 2,000 parameters took
# seconds), and the export and the dashboard draw one column per parameter.
MAX_PARAMETERS = 256
MAX_OPTIONS = 4096  # options of all `choice` dimensions together (a 30,000-option choice took 9 s to build)


def nesting_problem(data: Any, limit: int = MAX_DEPTH) -> str | None:
    """The field path of the first mapping or list in `data` nested deeper than `limit` levels (`data`
    itself is level 1), or None when there is none. Iterative and stops descending at the limit, so a
    document nested thousands of levels deep costs no recursion and no more than its first levels."""
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(data, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        children: Any
        if isinstance(node, Mapping):
            children = node.items()
        elif isinstance(node, list | tuple):
            children = enumerate(node)
        else:
            continue
        if depth > limit:
            return field_path(path)
        for key, child in children:
            if isinstance(child, Mapping | list | tuple):
                stack.append((child, depth + 1, (*path, key)))
    return None


def _space_width(node: Any) -> tuple[int, int]:
    """(parameters, choice options) of a space or of a nested space within it: every named entry is a
    parameter (a dimension or a constant), and so is each dimension that is a choice's option; options
    count over all choices."""
    params = options = 0
    entries = node.values() if isinstance(node, Mapping) and not is_dimension(node) else [node]
    for child in entries:
        if is_dimension(child):
            params += 1
            kind, args = next(iter(child.items()))
            if kind == "choice" and isinstance(args, list | tuple):
                options += len(args)
                for option in args:
                    if isinstance(option, Mapping):
                        p, o = _space_width(option)
                        params, options = params + p, options + o
        elif isinstance(child, Mapping):
            p, o = _space_width(child)
            params, options = params + p, options + o
        else:
            params += 1
    return params, options


def space_width_check(space: Mapping[str, Any]) -> None:
    """Raise `SpaceError` naming `space` when it has more than `MAX_PARAMETERS` parameters or more than
    `MAX_OPTIONS` choice options in all, or names a parameter with a '.' (nested names are joined by dots
    in exports and the dashboard, so `a.b` would be the name of both `a.b` and `a: {b}`)."""
    params, options = _space_width(space)
    if params > MAX_PARAMETERS:
        raise SpaceError("space", f"{params} parameters; a search space has at most {MAX_PARAMETERS}")
    if options > MAX_OPTIONS:
        raise SpaceError("space", f"{options} choice options in all; a search space has at most {MAX_OPTIONS}")
    dotted = _dotted_name(space, "space")
    if dotted is not None:
        raise SpaceError(
            dotted, "a parameter name may not contain '.': nested names are joined by dots (a.b is a: {b: ...})"
        )


def _dotted_name(node: Any, path: str) -> str | None:
    """The path of the first key with a '.' among the space's names (in nested spaces and choice options)."""
    if is_dimension(node):
        kind, args = next(iter(node.items()))
        if kind == "choice" and isinstance(args, list | tuple):
            for i, option in enumerate(args):
                found = _dotted_name(option, f"{path}.choice[{i}]")
                if found:
                    return found
        return None
    if isinstance(node, Mapping):
        for key, child in node.items():
            if "." in str(key):
                return f"{path}.{key}"
            found = _dotted_name(child, f"{path}.{key}")
            if found:
                return found
    return None
