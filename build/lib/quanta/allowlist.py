"""Which trainables may run: module prefixes from QUANTA_TRAINABLE_ALLOWLIST (default `examples.`).

The API checks a posted spec's trainable against it; every worker node checks it again before it
imports a warm-up module or starts a trial (the database and the broker are not trusted to hold only
what the API let in). Ground floor: imports nothing from `quanta`, so the runtime layer may use it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "QUANTA_TRAINABLE_ALLOWLIST"
DEFAULT = "examples."


@dataclass(frozen=True)
class Allowlist:
    prefixes: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Allowlist:
        """Comma-separated prefixes; blanks ignored."""
        return cls(tuple(p.strip() for p in text.split(",") if p.strip()))

    @classmethod
    def from_env(cls) -> Allowlist:
        return cls.parse(os.environ.get(ENV, DEFAULT))

    def allows(self, module: str) -> bool:
        """True when the module is an allowed package or lies inside one. A prefix names whole package
        components, with or without its trailing dot: `examples` and `examples.` both admit `examples`
        and `examples.mnist1d`, never `examples_evil`."""
        return any(module == p or module.startswith(p + ".") for p in (q.rstrip(".") for q in self.prefixes))

    def __str__(self) -> str:
        return ", ".join(repr(p) for p in self.prefixes) or "(none)"
