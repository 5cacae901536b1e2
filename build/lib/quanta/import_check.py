"""A trainable's module imported once, in a process of its own, before any trial starts.

A module that fails to import fails every trial of the search the same way: without `lightning`
installed, `examples/lightning_mnist1d.yaml` ran its 100 trials to 100 `ModuleNotFoundError`s. Importing
it once first finds that in seconds, and `ImportProblem.sentence` names the missing package and the
Quanta extra that provides it (from the installed distribution's metadata: `lightning` ->
`pip install 'quanta[integrations]'`).

Never in the process that asks: importing runs the module's code (and a server must not run it, nor pay
seconds of torch imports per request). Two places do it:

- `quanta run` and `quanta.sdk.run` read the answer of their trial template, the process trials are forked
  from, which imports the module anyway to warm it (`import_failure` is what it reports;
  `LocalRuntime.import_problem` waits for it), so the check costs no extra process.
- The API runs `check_import`: a short-lived `python -P` process that imports the module and answers,
  killed (with what it started) after a time bound. Successes are remembered per version of the
  module's file.

Ground floor: imports only `quanta.trainable_ref` (itself ground floor), so the runtime may use it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from quanta.trainable_ref import locate

log = logging.getLogger("quanta.import_check")

DISTRIBUTION = "quanta"
# Extras that are not for users' trainables: the development tools and the benchmarks' peers.
_INTERNAL_EXTRAS = frozenset({"dev", "bench", "peers"})
# Import names whose distribution is named otherwise.
_DISTRIBUTION_OF = {
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "PIL": "pillow",
    "mlflow": "mlflow-skinny",
    "yahpo_gym": "yahpo-gym",
    "huggingface_hub": "huggingface-hub",
    "cv2": "opencv-python",
    "skimage": "scikit-image",
}
_MARK = "QUANTA-IMPORT-CHECK "
# What the checking process runs: `import_failure`'s report, written out so that the process imports
# nothing of Quanta's before the module (whose project may have a package named like one of Quanta's).
_SCRIPT = f"""
import importlib, json, sys
try:
    importlib.import_module(sys.argv[1])
    answer = None
except BaseException as exc:
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    answer = {{"error": f"{{type(exc).__name__}}: {{exc}}", "missing": name.partition(".")[0] if name else None}}
sys.stdout.flush()
sys.stdout.write("\\n{_MARK}" + json.dumps(answer) + "\\n")
sys.stdout.flush()
"""


@dataclass(frozen=True)
class ImportProblem:
    """Why importing `module` failed: `error` (`ModuleNotFoundError: No module named 'lightning'`) and,
    when a module was not found, `missing`: its top-level package."""

    module: str
    error: str
    missing: str | None = None

    @classmethod
    def of(cls, module: str, failure: Mapping[str, Any]) -> ImportProblem:
        """From what `import_failure` reported."""
        return cls(module, str(failure.get("error") or "an error"), failure.get("missing") or None)

    def sentence(self) -> str:
        """The error as a user reads it: what failed and, for a missing package, how to install it."""
        head = f"importing module '{self.module}' failed with {self.error}"
        if self.missing is None:
            return f"{head}; every trial would fail the same way"
        found = extra_for(self.missing)
        if found is not None:
            extra, dist = found
            return (
                f"{head}: the {self.missing} package is not installed; it comes with Quanta's `{extra}` extra: "
                f"pip install 'quanta[{extra}]' (or pip install {dist})"
            )
        return (
            f"{head}: the {self.missing} package is not installed here; install it (pip install "
            f"{_DISTRIBUTION_OF.get(self.missing, self.missing)}, or the distribution that provides it), or "
            f"put the folder that holds it on PYTHONPATH"
        )


def import_failure(exc: BaseException) -> dict[str, Any]:
    """What a process that tried to import a module reports of the exception (JSON-ready): `error`, the
    exception's type and message, and `missing`, the top-level package of a module not found."""
    missing = None
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        missing = exc.name.partition(".")[0]
    return {"error": f"{type(exc).__name__}: {exc}", "missing": missing}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@lru_cache(maxsize=1)
def _extras() -> dict[str, list[str]]:
    """Each user-facing extra's requirements (normalised distribution names), from the installed
    distribution's metadata; empty when Quanta runs from a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        lines = requires(DISTRIBUTION) or []
    except PackageNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for line in lines:
        requirement, _, marker = line.partition(";")
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if extra is None or name is None or extra.group(1) in _INTERNAL_EXTRAS:
            continue
        if _normal(name.group(1)) == DISTRIBUTION:
            continue  # an extra made of other extras (`tracking`)
        out.setdefault(extra.group(1), []).append(_normal(name.group(1)))
    return out


def extra_for(package: str) -> tuple[str, str] | None:
    """(the Quanta extra that installs `package`, its distribution name), or None when no extra does.
    `package` is an import name (`lightning`, `sklearn`); the smallest extra wins when several do."""
    dist = _normal(_DISTRIBUTION_OF.get(package, package))
    candidates = sorted((len(reqs), extra) for extra, reqs in _extras().items() if dist in reqs)
    return (candidates[0][1], dist) if candidates else None


# ---- the API's check: a process of its own -------------------------------------------------------

_passed: dict[tuple[Any, ...], bool] = {}  # modules that imported, by the version of their file
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def _version(module: str) -> tuple[Any, ...]:
    """What the remembered answer for `module` depends on: its file's version and the import path."""
    try:
        spec = locate(module)
    except (ImportError, OSError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    try:
        st = os.stat(origin) if origin else None
    except OSError:
        st = None
    return (module, origin, st.st_mtime_ns if st else None, st.st_size if st else None, tuple(sys.path))


def check_import(module: str, timeout_s: float = 30.0) -> ImportProblem | None:
    """Import `module` in a new `python -P` process with this process's import path (its absolute
    entries, as the trial template gets them) and return why it failed, or None: it imported, or the
    check could not conclude (no answer within `timeout_s`, the process killed or unable to start),
    which refuses nothing. A module that imported is not checked again until its file changes."""
    key = _version(module)
    if _passed.get(key):
        return None
    with _locks_lock:
        lock = _locks.setdefault(module, threading.Lock())
    with lock:  # one check at a time per module: concurrent requests share its answer
        if _passed.get(key):
            return None
        answer = _run_check(module, timeout_s)
        if answer is None:
            return None
        if answer.get("ok"):
            _passed[key] = True
            return None
        return ImportProblem.of(module, answer)


def _run_check(module: str, timeout_s: float) -> dict[str, Any] | None:
    """{"ok": True}, or the failure `import_failure` reported; None when there was no answer."""
    env = {
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isabs(p)),
    }
    try:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-c", _SCRIPT, module],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own group: a timeout kills what the module started too
        )
    except OSError as exc:
        log.warning("cannot check that %s imports: %s", module, exc)
        return None
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        log.warning("importing %s took longer than %.0f s; not checked", module, timeout_s)
        return None
    for line in reversed(out.decode(errors="replace").splitlines()):
        if line.startswith(_MARK):
            failure = json.loads(line[len(_MARK) :])
            return {"ok": True} if failure is None else failure
    log.warning("importing %s ended without an answer (exit code %s); not checked", module, proc.returncode)
    return None
