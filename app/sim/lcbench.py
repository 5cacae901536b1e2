"""LCBench through YAHPO Gym's surrogate: a configuration's whole learning curve in one batched call.

YAHPO Gym's LCBench surrogate (`../shared/data/yahpo/lcbench/`: `model.onnx`, `config_space.json`,
`encoding.json`) answers, for one of 34 OpenML tasks, a configuration of 7 hyperparameters and an
`epoch` in 1..52: the cumulative training `time` in seconds and `val_accuracy` in percent (among other
outputs). `LCBench` turns that into what the simulator needs per trial: a `Curve` (every epoch's
cumulative time and validation accuracy as a fraction), computed once per configuration with all 52
epochs in ONE call of the model (52 rows at once: yahpo's `objective_function` builds each row in
Python, 36 ms per configuration, too slow for a search of thousands of trials) and cached.

Contract:
- `SurrogateModel` is the one thing `LCBench` runs: rows of continuous inputs (columns `cont_names`,
  float32, `epoch` among them) of one task -> rows of outputs (columns `y_names`, `time` and
  `val_accuracy` among them). `YahpoModel` is the real one (the ONNX session yahpo_gym opened, fed the
  same encoded rows `objective_function` would build: a test checks they agree); tests use a small
  stand-in with the same shape and no ONNX.
- `LCBench.curve(params)` / `curves([params, ...])`: `params` are the 7 hyperparameters (as a search
  proposes them: integers may come as floats); they are rounded and clipped to the config space first
  (`normalize`), so equal configurations share one cached curve. Surrogate outputs are cleaned where a
  learning curve cannot be what the network says: cumulative times are made strictly increasing (each
  epoch at least `MIN_EPOCH_S`), accuracies are clipped to [0, 1].
- `LCBench.space`: the config space as a Quanta search space (`lcbench_space`): floats uniform or
  loguniform, log-scaled integers loguniform too (rounded by `normalize`: HyperOpt's quantised
  dimensions make TPE's asks 3x slower), other integers `randint(low, high + 1)`, bounds read from
  `config_space.json`.
- `load_lcbench(task, data_path)` opens the real surrogate with yahpo_gym (never copying the data).
  The data folder is `data_path`, else `$QUANTA_YAHPO_DATA`, else `../shared/data/yahpo` beside the
  project root (`data_dir`).

Needs the `sim` extra (`yahpo-gym`, `onnxruntime`) only for the real model; nothing here is imported by
the controller.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the project root
DATA_ENV = "QUANTA_YAHPO_DATA"
SCENARIO = "lcbench"
FIDELITY = "epoch"
TASK_PARAM = "OpenML_task_id"
MIN_EPOCH_S = 1e-3  # the shortest epoch a cleaned curve keeps (the surrogate's time may stall or dip)

# The tasks issue 13 benchmarks on; the other ten of LCBench's 34 are kept for independent checks.
SUITE = (
    "3945", "34539", "126025", "126029", "146212", "167149", "167152", "167161", "167181", "167184",
    "167185", "167200", "167201", "168329", "168331", "168335", "168908", "168910", "189862", "189865",
    "189873", "189905", "189908", "189909",
)  # fmt: skip
# The other ten: never used to choose a default or a knob, only to check one chosen on the suite.
HELD_OUT = ("7593", "126026", "167104", "167168", "167190", "168330", "168868", "189354", "189866", "189906")


@dataclass(frozen=True)
class Curve:
    """One configuration's learning curve: after epoch e (1-based), `time[e-1]` cumulative seconds of
    training (strictly increasing) and `val_accuracy[e-1]` (a fraction in [0, 1])."""

    time: tuple[float, ...]
    val_accuracy: tuple[float, ...]

    @property
    def epochs(self) -> int:
        return len(self.time)

    @property
    def best(self) -> float:
        """The best validation accuracy over all epochs (curves can peak before the last)."""
        return max(self.val_accuracy)


class SurrogateModel(Protocol):
    """A surrogate network: `predict(task, x_cont)` returns one row of outputs (columns `y_names`) per
    row of continuous inputs (columns `cont_names`, float32) for OpenML task `task`."""

    cont_names: Sequence[str]
    y_names: Sequence[str]

    def predict(self, task: str, x_cont: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class Param:
    """One hyperparameter of the config space (`config_space.json`)."""

    name: str
    kind: str  # "float" | "int"
    low: float
    high: float
    log: bool


def read_params(config_space: Mapping[str, Any]) -> tuple[tuple[Param, ...], int, tuple[str, ...]]:
    """The searchable hyperparameters of a ConfigSpace JSON document (in its order), the fidelity's
    largest value (epochs) and the task choices. Raises ValueError naming what is missing or unknown."""
    params: list[Param] = []
    epochs: int | None = None
    tasks: tuple[str, ...] = ()
    for i, hp in enumerate(config_space.get("hyperparameters") or []):
        name, kind = hp.get("name"), hp.get("type")
        if name == TASK_PARAM:
            tasks = tuple(str(c) for c in hp.get("choices") or ())
            continue
        if name == FIDELITY:
            epochs = int(hp["upper"])
            continue
        if kind not in ("uniform_float", "uniform_int"):
            raise ValueError(f"config_space.hyperparameters[{i}] ({name}): type {kind!r} is not supported")
        params.append(
            Param(str(name), "int" if kind == "uniform_int" else "float", hp["lower"], hp["upper"], bool(hp["log"]))
        )
    if epochs is None or not params:
        raise ValueError(f"config_space: no '{FIDELITY}' fidelity or no hyperparameters")
    return tuple(params), epochs, tasks


def lcbench_space(params: Sequence[Param]) -> dict[str, Any]:
    """The config space as a Quanta search space (see the module docstring for the mapping)."""
    out: dict[str, Any] = {}
    for p in params:
        if p.kind == "float":
            out[p.name] = {"loguniform" if p.log else "uniform": [p.low, p.high]}
        elif p.log:
            # Not qloguniform: HyperOpt's TPE scores quantised log dimensions in a Python loop per
            # candidate (3x slower asks here); the surrogate rounds the value (`LCBench.normalize`).
            out[p.name] = {"loguniform": [p.low, p.high]}
        else:
            out[p.name] = {"randint": [int(p.low), int(p.high) + 1]}
    return out


class LCBench:
    """One LCBench task through a surrogate model: learning curves of configurations, cached."""

    def __init__(self, model: SurrogateModel, config_space: Mapping[str, Any], task: str):
        self.model = model
        self.task = str(task)
        self.params, self.epochs, tasks = read_params(config_space)
        if tasks and self.task not in tasks:
            raise ValueError(f"task: {self.task!r} is not an LCBench task (known: {', '.join(tasks)})")
        self.space = lcbench_space(self.params)
        missing = [n for n in (FIDELITY, *(p.name for p in self.params)) if n not in model.cont_names]
        if missing or "time" not in model.y_names or "val_accuracy" not in model.y_names:
            names = f"inputs {list(model.cont_names)} / outputs {list(model.y_names)}"
            raise ValueError(f"surrogate model: {names} lack {missing or ['time', 'val_accuracy']}")
        self._cols = [list(model.cont_names).index(p.name) for p in self.params]
        self._epoch_col = list(model.cont_names).index(FIDELITY)
        self._time_col = list(model.y_names).index("time")
        self._acc_col = list(model.y_names).index("val_accuracy")
        self._cache: dict[tuple[float, ...], Curve] = {}
        self.calls = 0  # model calls made (each one batched)

    def normalize(self, params: Mapping[str, Any]) -> dict[str, float | int]:
        """The configuration as the surrogate takes it: integers rounded, every value clipped to its
        bounds. Raises ValueError naming a missing or non-numeric hyperparameter."""
        out: dict[str, float | int] = {}
        for p in self.params:
            if p.name not in params:
                raise ValueError(f"config: hyperparameter '{p.name}' is missing")
            try:
                v = float(params[p.name])
            except (TypeError, ValueError):
                raise ValueError(f"config.{p.name}: not a number: {params[p.name]!r}") from None
            if not math.isfinite(v):
                raise ValueError(f"config.{p.name}: not finite: {v}")
            v = min(max(v, p.low), p.high)
            out[p.name] = int(round(v)) if p.kind == "int" else v
        return out

    def _key(self, cfg: Mapping[str, float | int]) -> tuple[float, ...]:
        return tuple(float(np.float32(cfg[p.name])) for p in self.params)  # what the model sees

    def curve(self, params: Mapping[str, Any]) -> Curve:
        """The learning curve of one configuration (one model call for all epochs; cached)."""
        return self.curves([params])[0]

    def curves(self, configs: Sequence[Mapping[str, Any]]) -> list[Curve]:
        """Learning curves of many configurations: the ones not cached yet in ONE model call."""
        keys = [self._key(self.normalize(c)) for c in configs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._cache))
        if todo:
            e = self.epochs
            x = np.zeros((len(todo) * e, len(self.model.cont_names)), dtype=np.float32)
            x[:, self._cols] = np.repeat(np.asarray(todo, dtype=np.float32), e, axis=0)
            x[:, self._epoch_col] = np.tile(np.arange(1, e + 1, dtype=np.float32), len(todo))
            y = np.asarray(self.model.predict(self.task, x), dtype=np.float64)
            self.calls += 1
            if y.shape[0] != x.shape[0]:
                raise ValueError(f"surrogate model: {y.shape[0]} output rows for {x.shape[0]} inputs")
            times = y[:, self._time_col].reshape(len(todo), e)
            accs = y[:, self._acc_col].reshape(len(todo), e)
            for k, t, a in zip(todo, times, accs, strict=True):
                self._cache[k] = clean_curve(t, a)
        return [self._cache[k] for k in keys]

    def sample(self, n: int, seed: int) -> list[dict[str, float | int]]:
        """`n` configurations drawn uniformly from the config space (log scale where it says log;
        integers uniform over their values), reproducible per seed."""
        rng = np.random.default_rng(seed)
        cols: dict[str, np.ndarray] = {}
        for p in self.params:
            if p.kind == "int" and not p.log:
                cols[p.name] = rng.integers(int(p.low), int(p.high) + 1, size=n)
            elif p.log:
                cols[p.name] = np.exp(rng.uniform(math.log(p.low), math.log(p.high), size=n))
            else:
                cols[p.name] = rng.uniform(p.low, p.high, size=n)
        return [self.normalize({name: col[i] for name, col in cols.items()}) for i in range(n)]


def clean_curve(time: np.ndarray, val_accuracy_pct: np.ndarray) -> Curve:
    """A `Curve` from the surrogate's raw outputs: cumulative times strictly increasing (every epoch at
    least `MIN_EPOCH_S`; the surrogate's time is a regression and may dip), accuracy as a fraction."""
    t = np.array(time, dtype=np.float64)
    t[0] = max(t[0], MIN_EPOCH_S)
    # ends[k] = max(t[k], ends[k-1] + MIN_EPOCH_S): where the surrogate's time rises, it is kept as is.
    lift = MIN_EPOCH_S * np.arange(len(t))
    ends = np.maximum.accumulate(t - lift) + lift
    acc = np.clip(np.asarray(val_accuracy_pct, dtype=np.float64) / 100.0, 0.0, 1.0)
    return Curve(tuple(ends.tolist()), tuple(acc.tolist()))


# ---- the real surrogate (yahpo_gym + onnxruntime) --------------------------------------------------


def data_dir(data_path: str | os.PathLike[str] | None = None) -> Path:
    """The YAHPO data folder (the one holding `lcbench/`): `data_path`, else `$QUANTA_YAHPO_DATA`, else
    `../shared/data/yahpo` beside the project root. Raises FileNotFoundError naming the folder looked
    at and how to choose another."""
    chosen = data_path or os.environ.get(DATA_ENV) or ROOT.parent / "shared" / "data" / "yahpo"
    path = Path(chosen).expanduser().resolve()
    if not (path / SCENARIO / "model.onnx").is_file():
        raise FileNotFoundError(
            f"YAHPO data: no {SCENARIO}/model.onnx under {path} (pass data_path or set {DATA_ENV} to the "
            "folder that holds lcbench/)"
        )
    return path


class YahpoModel:
    """The LCBench surrogate as yahpo_gym opens it: its ONNX session, fed rows encoded as
    `BenchmarkSet.objective_function` encodes them (categorical task code, continuous columns in
    yahpo's `cont_names` order) but built with numpy for many rows at once."""

    def __init__(self, bench: Any):
        self.bench = bench
        cfg = bench.config
        self.cont_names: Sequence[str] = tuple(cfg.cont_names)
        self.y_names: Sequence[str] = tuple(cfg.y_names)
        cats = [c for c in cfg.cat_names if c not in cfg.drop_predict]
        if cats != [TASK_PARAM]:
            raise ValueError(f"yahpo {SCENARIO}: expected the one categorical input {TASK_PARAM}, got {cats}")
        self._encoding: Mapping[str, int] = bench.encoding[TASK_PARAM]
        inputs = bench.session.get_inputs()
        self._cat_name, self._cont_name = inputs[0].name, inputs[1].name  # the order yahpo feeds them
        self._out = bench.session.get_outputs()[0].name

    def predict(self, task: str, x_cont: np.ndarray) -> np.ndarray:
        code = self._encoding.get(str(task))
        if code is None:
            raise ValueError(f"task: {task!r} has no code in the surrogate's encoding")
        x_cat = np.full((x_cont.shape[0], 1), code, dtype=np.int32)
        feed = {self._cat_name: x_cat, self._cont_name: np.ascontiguousarray(x_cont, dtype=np.float32)}
        return np.asarray(self.bench.session.run([self._out], feed)[0])


_BENCH: dict[Path, Any] = {}  # one yahpo BenchmarkSet (one ONNX session) per data folder and process


def yahpo_bench(data_path: str | os.PathLike[str] | None = None) -> Any:
    """yahpo_gym's `BenchmarkSet("lcbench")` over the data folder (`data_dir`), opened once per process,
    single-threaded (the simulator's budget is one core)."""
    path = data_dir(data_path)
    bench = _BENCH.get(path)
    if bench is None:
        try:
            from yahpo_gym import benchmark_set, local_config  # type: ignore[import-untyped]
        except ImportError as exc:
            raise ImportError(f"the LCBench surrogate needs the 'sim' extra (pip install -e '.[sim]'): {exc}") from None
        # yahpo_gym keeps the data path in a settings file it writes and reads back (~/.config/yahpo_gym by
        # default), so processes opening the surrogate at once (`--jobs`, test workers) read each other's
        # half-written file and fail. This process writes its own, in a folder removed when it exits.
        own = Path(tempfile.mkdtemp(prefix="quanta-yahpo-"))
        atexit.register(shutil.rmtree, own, True)
        local_config.settings_path = own / "config.yaml"
        local_config.init_config()
        local_config.set_data_path(str(path))
        bench = benchmark_set.BenchmarkSet(SCENARIO, check=False, multithread=False)
        _BENCH[path] = bench
    return bench


def load_lcbench(task: str, data_path: str | os.PathLike[str] | None = None) -> LCBench:
    """LCBench task `task` through the real surrogate (see `data_dir` for where the data is read)."""
    path = data_dir(data_path)
    with open(path / SCENARIO / "config_space.json") as fh:
        space = json.load(fh)
    return LCBench(YahpoModel(yahpo_bench(path)), space, task)
