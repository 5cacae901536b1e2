"""docs/spec.md is the schema's: regenerated, it is unchanged, and every field of the schema is on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from quanta.executor.policy.knobs import KNOBS
from quanta.spec import SearchSpec
from quanta.spec_reference import COMMAND, main, nested_models, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def schema_fields(model: type[BaseModel] = SearchSpec, prefix: str = "") -> Iterator[tuple[str, str | None]]:
    """(dotted path, description) of every field reachable from `model`, the scheduler's policies included."""
    for name, field in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        yield path, field.description
        nested = list(KNOBS.values()) if path == "scheduler" else nested_models(field.annotation)
        for sub in nested:
            yield from schema_fields(sub, path)


def test_the_committed_page_is_the_schemas():
    assert PAGE.read_text() == render(), f"docs/spec.md is out of date: run `{COMMAND}`"


def test_every_field_of_the_schema_is_on_the_page_with_a_description():
    page = render()
    fields = dict(schema_fields())
    assert len(fields) > 60  # the walk reached the blocks, the policies and their experimental knobs
    missing = [p for p in fields if p != "scheduler.policy" and f"| `{p}` |" not in page]
    assert missing == []
    assert [p for p, d in fields.items() if not d and p != "scheduler.policy"] == []
    for policy in KNOBS:
        assert f"### `policy: {policy}`" in page


def test_fields_users_looked_for_are_there():
    page = PAGE.read_text()
    for path in ("budget.stop_on_target", "resources.devices_per_trial", "scheduler.experimental.sticky"):
        assert f"| `{path}` |" in page
    assert "#### `scheduler.experimental` (experimental, gandiva)" in page
    assert "| `scheduler.rule` |" in page and "`search.multivariate`" in page  # a knob and a removed one


def test_check_names_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "spec.md"
    stale.write_text("# old\n")
    assert main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--write", str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0
