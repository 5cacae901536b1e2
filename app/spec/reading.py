"""Reading a spec: text (YAML or JSON, `decode_spec_text`), a mapping (`parse_spec`), a file (`load_spec`),
a stored search's row (`spec_from_stored`, validated once per process), and a spec placed for a local
run (`place_locally`). Each returns a validated, immutable `SearchSpec` or raises `SpecError` naming every
bad field; nothing here touches a database or a device."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from quanta.search.knobs import KnobError
from quanta.search.space import SpaceError
from quanta.spec.errors import SpecError, field_path
from quanta.spec.limits import MAX_DEPTH, nesting_problem
from quanta.spec.model import SearchSpec


def place_locally(spec: SearchSpec, spec_dir: str | Path) -> SearchSpec:
    """`spec` as `quanta run` and `quanta.sdk.run` run it, on this machine, for a spec file in `spec_dir`
    (a spec given as data: the working directory). The trainable is placed (`place_trainable`: a module
    beside the spec, a file path relative to it), the folder it needs goes first on `sys.path`, which the
    trial template inherits, and the returned spec names the `module:function` trial processes import.
    Raises `SpecError` on `trainable` when it cannot run: a file that is not there, a module that cannot
    be found (saying where it was looked for and what to do), a function its module lacks."""
    import sys

    from quanta.trainable_ref import TrainableNotFound, local_hint, place_trainable

    try:
        placed = place_trainable(spec.trainable, spec_dir)
    except TrainableNotFound as exc:
        raise SpecError([("trainable", str(exc))], spec.name) from None
    if placed.folder is not None and placed.folder not in sys.path:
        sys.path.insert(0, placed.folder)
    if placed.ref != spec.trainable:
        spec = spec.model_copy(update={"trainable": placed.ref})
    problem = spec.trainable_problem(local_hint(placed.ref, spec_dir))
    if problem is not None:
        raise SpecError([("trainable", problem)], spec.name)
    return spec


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases. A few hundred bytes of nested aliases expand to billions of
    nodes (the "billion laughs"): they are refused where the document is composed, before anything is
    expanded. A spec has no use for them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in a spec", event.start_mark
            )
        event = self.peek_event()
        if getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "YAML anchors (&name) are not accepted in a spec", event.start_mark
            )
        return super().compose_node(parent, index)


def _load_yaml(text: str | bytes) -> Any:
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader: plain data only


def decode_spec_text(
    text: str | bytes, fmt: Literal["yaml", "json", "auto"] = "auto", *, origin: str | None = None
) -> dict[str, Any]:
    """The mapping of fields in a spec's text: `fmt` "json" or "yaml" parses that format, "auto" parses
    YAML (a superset of JSON, so either). The one place spec text is decoded (files, the API, strings).

    Raises `SpecError` when the text does not parse, nests too deeply, or is not a mapping.
    """
    label = {"json": "JSON", "yaml": "YAML", "auto": "YAML or JSON"}[fmt]
    try:
        data = json.loads(text) if fmt == "json" else _load_yaml(text)
    except (ValueError, yaml.YAMLError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise SpecError([("spec", f"not valid {label}: {exc}")], origin) from None
    except RecursionError:
        raise SpecError([("spec", "nested too deeply")], origin) from None
    if not isinstance(data, Mapping):
        raise SpecError([("spec", "must be a mapping of fields")], origin)
    return dict(data)


def parse_spec(
    source: str | bytes | Mapping[str, Any], *, origin: str | None = None, stored: bool = False
) -> SearchSpec:
    """Validate a spec from YAML/JSON text or an already-parsed mapping. `stored`: it is a stored search's
    spec (`spec_from_stored`), written by an earlier version maybe: the rules that came later and would
    refuse it (two blocks' rungs that differ) are not applied, so a search keeps what it was created with.

    Raises `SpecError` naming every bad field; never returns a partially valid spec.
    """
    data = decode_spec_text(source, origin=origin) if isinstance(source, str | bytes) else dict(source)
    too_deep = nesting_problem(data)
    if too_deep is not None:
        raise SpecError([(too_deep, f"nested more than {MAX_DEPTH} levels deep")], origin)
    try:
        return SearchSpec.model_validate(data, context={"stored": stored})
    except SpaceError as exc:  # raised directly when pydantic re-raises non-ValueErrors
        raise SpecError([(exc.path, exc.reason)], origin) from None
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            ctx_err = (err.get("ctx") or {}).get("error")
            if isinstance(ctx_err, SpaceError):
                errors.append((ctx_err.path, ctx_err.reason))
            elif isinstance(ctx_err, KnobError):  # raised by its block: the block's path, then the knob
                block = tuple(err["loc"])
                path = f"{field_path(block, err['type'])}.{ctx_err.field}" if block else ctx_err.field
                errors.append((path, ctx_err.reason))
            else:
                msg = err["msg"].removeprefix("Value error, ")
                errors.append((field_path(tuple(err["loc"]), err["type"]), msg))
        raise SpecError(errors, origin) from None


def load_spec(path: str | Path) -> SearchSpec:
    """Read and validate a spec file (.yaml, .yml or .json)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError([("spec", f"cannot read {p}: {exc.strerror}")], str(p)) from None
    return parse_spec(decode_spec_text(text, "json" if p.suffix == ".json" else "auto", origin=str(p)), origin=str(p))


_STORED: dict[str, SearchSpec] = {}  # spec_from_stored's cache, by the stored spec's JSON text
_STORED_MAX = 256
_STORED_LOCK = threading.Lock()


def spec_from_stored(data: Mapping[str, Any]) -> SearchSpec:
    """The `SearchSpec` of a stored search (its `spec` column: the `model_dump(mode="json")` written when
    it was created). The one way a stored spec becomes a `SearchSpec`: the controller when it starts or
    reloads a search, every node for each trial it launches.

    Each distinct spec is validated once per process: the result is cached by the spec's JSON text (in
    its stored key order, which is part of the spec: it orders the search space), so a node starting
    many trials of a search parses its spec once. `SearchSpec` is frozen, so sharing it is safe.
    Raises `SpecError` as `parse_spec` does (nothing is cached then).
    """
    key = json.dumps(data, separators=(",", ":"))
    spec = _STORED.get(key)
    if spec is None:
        spec = parse_spec(data, stored=True)
        with _STORED_LOCK:
            if len(_STORED) >= _STORED_MAX:
                del _STORED[next(iter(_STORED))]  # the oldest
            _STORED[key] = spec
    return spec
