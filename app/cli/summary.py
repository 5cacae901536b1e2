"""The table `quanta run` and `quanta resume --db` print when a search ends: its status (a failure with
its reason), a warning, the best metric and configuration, the target, the trials counted by state, why
trials alive at the end were stopped, the first failed trial's traceback, and where it is stored."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def short_traceback(error: str, lines: int = 12) -> str:
    """A failed trial's error shortened for a summary: its last `lines` lines (where a traceback names the
    trainable's line and the exception), after the traceback's first line when it is one."""
    all_lines = error.strip().splitlines()
    if len(all_lines) <= lines:
        return "\n".join(all_lines)
    head = [all_lines[0], "  ..."] if all_lines[0].startswith("Traceback") else ["..."]
    return "\n".join(head + all_lines[-lines:])


def print_summary(result: dict[str, Any], metric: str, goal: str, db: str, workdir: Path) -> None:
    """Print `result` (`quanta.db.summary.search_result`, of a search whose metric is `metric`, to
    `goal`) as a table on stdout, unwrapped when stdout is not a terminal (logs and CI)."""
    from quanta.status import SearchStatus, TrialCounts

    search_id, target = result["search_id"], result["target"]
    table = Table(title=f"search {search_id}: {result['name']}", show_header=False)
    failed = result["status"] == SearchStatus.FAILED
    status = f"[red]failed[/]: {result['error']}" if failed and result.get("error") else result["status"]
    table.add_row("status", status)
    if result.get("warning"):
        table.add_row("warning", f"[yellow]{result['warning']}[/]")
    table.add_row("best metric", f"{metric} = {result['best_metric']}")
    table.add_row("best config", json.dumps(result["best_params"]))
    if target is None:
        table.add_row("target", "none: the search ran its budget")
    else:
        said = target if isinstance(target, str) else f"{target} ({goal})"  # a sentence: several objectives
        if result["reached"]:
            table.add_row("target", f"{said}: reached after {result['seconds_to_target']:.1f} s")
        else:
            table.add_row("target", f"{said}: not reached")
    if result.get("wall_seconds") is not None:
        table.add_row("wall time", f"{result['wall_seconds']:.1f} s")
    counts = TrialCounts.from_dict(result["counts"])
    table.add_row("trials", f"{len(result['trials'])}: {counts.text()}")
    stopped = Counter(t.get("reason") or "" for t in result["trials"] if t["status"] == "stopped")
    if stopped:  # say why: "stopped" alone read as if those trials had been cut short by mistake
        reason = stopped.most_common(1)[0][0]
        table.add_row(
            "stopped", f"{sum(stopped.values())} alive (running, parked or queued) when {reason or 'it ended'}"
        )
    first = next((t for t in result["trials"] if t["status"] == "failed" and t.get("error")), None)
    if first is not None:  # the first failure's traceback, so a broken trainable is seen at once
        table.add_row(f"first failure (trial {first['id']})", short_traceback(first["error"]), style="red")
    table.add_row("stored in", f"{db} (search {search_id}); checkpoints and logs in {workdir}")
    console = Console()
    if not console.is_terminal:  # logs and CI: do not wrap paths at 80 columns
        console = Console(width=200)
    console.print(table)
