"""How stored values are shown to readers: a search's spec parsed leniently (`parsed_spec`), documents
bounded in depth (`shown`), floats JSON can carry (`finite`) and a quantum's comma-separated columns as
lists (`device_list`, `id_list`). None of them raises on what an older version stored (`parsed_spec` logs
it and gives None), so a row that no longer parses still lists and reads.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from quanta.db.models import SearchRow
from quanta.spec import MAX_DEPTH, SearchSpec, SpecError, spec_from_stored

log = logging.getLogger("quanta.db")


def parsed_spec(row: SearchRow) -> SearchSpec | None:
    """The search's spec, parsed (it was validated when submitted); None when the stored one no longer
    parses (e.g. written by another version), so readers still see the row."""
    try:
        return spec_from_stored(row.spec or {})
    except SpecError:
        log.warning("search %s: its stored spec does not parse", row.id)
        return None


NESTED_TOO_DEEPLY = "[nested too deeply to show]"


def shown(value: Any, limit: int = MAX_DEPTH) -> Any:
    """`value` as a reader is sent it: mappings and lists nested deeper than `limit` levels are replaced by
    `NESTED_TOO_DEEPLY`. Specs are refused deeper than that when posted, but a row stored before the
    bound must not make every page that shows it fail (JSON encoders give up a few hundred levels down)."""
    if not isinstance(value, dict | list):
        return value
    if limit <= 0:
        return NESTED_TOO_DEEPLY
    if isinstance(value, dict):
        return {k: shown(v, limit - 1) for k, v in value.items()}
    return [shown(v, limit - 1) for v in value]


def finite(x: float | None) -> float | None:
    """`x`, or None when it is NaN or infinite (JSON cannot carry those)."""
    return x if x is not None and math.isfinite(x) else None


def id_list(text: str) -> list[int]:
    """The ids in a comma-separated column (`QuantumRow.packed_with`); anything else in it is skipped."""
    return [int(p) for p in text.split(",") if p.strip().lstrip("-").isdigit()]


def device_list(text: str) -> list[str]:
    """The device names in a comma-separated column (`QuantumRow.devices`)."""
    return [d for d in text.split(",") if d]
