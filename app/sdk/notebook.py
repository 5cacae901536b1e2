"""What makes the SDK pleasant in a terminal and in Jupyter: a progress bar for `Search.wait`, trials as
a pandas DataFrame, the best-so-far plot. The libraries are optional and imported on use: rich (a core
dependency) draws the bar in a terminal, tqdm (`tqdm.auto`, its Jupyter widget) in a notebook; pandas
makes the DataFrame; matplotlib draws the plot (`pip install -e ".[notebook]"` brings pandas, pyarrow
and tqdm).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

ProgressKind = Literal["terminal", "notebook"]
# The fields of a TrialOut (quanta.db.public.trials) but its params: the columns of a search without trials.
TRIAL_COLUMNS = (
    "id", "search_id", "number", "status", "metric", "best_metric", "steps", "device_seconds", "retries",
    "error", "reason", "created_at", "started_at", "finished_at",
)  # fmt: skip


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell)."""
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None) if shell is not None else None
    ip = get() if callable(get) else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def progress_kind(progress: bool | ProgressKind | None) -> ProgressKind | None:
    """Which bar `Search.wait(progress=...)` draws: None = automatic (a notebook's bar in Jupyter, rich's
    in a terminal, none when output goes to a file or pipe), False = none, True = the automatic kind
    even when output is not a terminal, or the kind named."""
    if progress is False:
        return None
    if progress in ("terminal", "notebook"):
        return progress
    if in_notebook():
        return "notebook"
    if progress is True or sys.stderr.isatty():
        return "terminal"
    return None


class Bar(Protocol):
    def update(self, done: int, total: int | None, text: str) -> None: ...
    def close(self) -> None: ...


class _RichBar:
    def __init__(self, title: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[text]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._task = self._progress.add_task(title, total=None, text="")
        self._progress.start()

    def update(self, done: int, total: int | None, text: str) -> None:
        self._progress.update(self._task, completed=done, total=total, text=text)

    def close(self) -> None:
        self._progress.stop()


class _TqdmBar:
    def __init__(self, title: str):
        try:
            from tqdm.auto import tqdm
        except ImportError:
            raise ImportError("a notebook progress bar needs tqdm: pip install 'quanta[notebook]' (or tqdm)") from None
        self._bar = tqdm(desc=title, total=None, unit="trial")

    def update(self, done: int, total: int | None, text: str) -> None:
        if total is not None and self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)
        self._bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        self._bar.close()


def make_bar(kind: ProgressKind, title: str) -> Bar:
    return _TqdmBar(title) if kind == "notebook" else _RichBar(title)


def progress_text(data: Mapping[str, Any]) -> str:
    """`status · best accuracy=0.91 · target reached` for a SearchOut."""
    parts = [str(data.get("status"))]
    metric = (data.get("metric") or {}).get("name") or "metric"
    best = (data.get("best") or {}).get("metric")
    if best is not None:
        parts.append(f"best {metric}={best:.4g}")
    if data.get("reached"):
        parts.append("target reached")
    return " · ".join(parts)


def trials_frame(items: Sequence[Mapping[str, Any]]) -> Any:
    """TrialOut dicts as a pandas DataFrame, one row per trial, parameters flattened to `params.<name>`
    columns (nested ones joined by dots). Raises ImportError when pandas is not installed."""
    import pandas as pd

    frame = pd.json_normalize([dict(t) for t in items], sep=".")
    if not items:  # an empty search: the columns every trial has, no rows
        frame = pd.DataFrame(columns=list(TRIAL_COLUMNS))
    return frame


FRONT_COLUMNS = ("trial_id", "number", "step", "seconds", "status")


def pareto_frame(body: Mapping[str, Any]) -> Any:
    """The front of a ParetoOut (`GET /searches/{id}/pareto`) as a pandas DataFrame, one row per point:
    `FRONT_COLUMNS`, then one column per objective (named as the objective, the user's units), then the
    trial's parameters flattened to `params.<name>` columns. Raises ImportError when pandas is missing."""
    import pandas as pd

    names = [o["name"] for o in body.get("objectives") or []]
    rows = [
        {
            **{c: p.get(c) for c in FRONT_COLUMNS},
            **{n: p["values"].get(n) for n in names},
            "params": p.get("params") or {},
        }
        for p in body.get("front") or []
    ]
    if not rows:
        return pd.DataFrame(columns=[*FRONT_COLUMNS, *names])
    return pd.json_normalize(rows, sep=".")


def plot_best(points: Sequence[Sequence[float]], metric: Mapping[str, Any], title: str, ax: Any = None) -> Any:
    """Best-so-far (y) against seconds since the search started (x), as steps, on `ax` (a new figure's
    when None); the target as a dashed line. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    name = metric.get("name") or "metric"
    ax.step(xs, ys, where="post", marker="o", markersize=3, label=f"best {name}")
    if metric.get("target") is not None:
        ax.axhline(float(metric["target"]), linestyle="--", color="grey", linewidth=1, label="target")
    ax.set_xlabel("seconds since the search started")
    ax.set_ylabel(f"best {name} so far ({metric.get('goal') or ''})")
    ax.set_title(title)
    ax.legend(loc="best")
    return ax
