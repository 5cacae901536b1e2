"""A cluster on one machine: real Redis and PostgreSQL on free loopback ports, worker processes standing
for nodes, and a controller process, all through the `quanta` CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest_services import PostgresServer, RedisServer, postgres_fixture, services_missing
from tests.integration.live_server import same_pythonpath

ROOT = Path(__file__).resolve().parents[2]

DEAD_AFTER_S = 4.0  # the controller presumes a node lost after this long without a heartbeat
LEASE_S = 2.5  # a node stops its own trials after this long without writing one (< DEAD_AFTER_S)
ACTION_TIMEOUT_S = 8.0  # a round a node never reports applied (lost with the broker) is planned again


postgres = pytest.fixture(scope="session", name="postgres")(postgres_fixture)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    """Processes of one test's cluster; everything still running is killed at the end."""

    def __init__(self, tmp: Path, redis: RedisServer, db_url: str):
        self.tmp = tmp
        self.redis = redis
        self.db_url = db_url
        self.checkpoints = tmp / "checkpoints"
        self.logs = tmp / "logs"
        for d in (self.checkpoints, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self._incarnations: dict[str, str | None] = {}  # each node's incarnation before its worker last started
        self._store = None

    @property
    def store(self):  # noqa: ANN201
        from quanta.db.store import Store

        if self._store is None:
            self._store = Store(self.db_url)
        return self._store

    def _spawn(self, name: str, args: list[str], **env_over: str) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115
        env = {
            **os.environ,
            "PYTHONPATH": same_pythonpath(),  # the `quanta` the tests import (a worktree's too), and `tests.*`
            "PYTHONUNBUFFERED": "1",
            "QUANTA_TRAINABLE_ALLOWLIST": "tests.,examples.",  # workers check it too
            **env_over,
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "quanta.cli", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        self.procs[name] = proc
        return proc

    def worker(self, node: str, devices: str = "cpu:2", wait: bool = True) -> subprocess.Popen:
        self._incarnations[node] = self._incarnation(node)
        proc = self._spawn(
            node,
            [
                *("worker", "--node", node, "--devices", devices, "--broker", self.redis.url, "--db", self.db_url),
                *("--checkpoints", str(self.checkpoints), "--lease", str(LEASE_S), "--verbose"),
            ],
        )
        if wait:
            self.wait_node(node)
        return proc

    def _incarnation(self, node: str) -> str | None:
        from quanta.db.cluster import NodeRow

        with self.store.session() as s:
            row = s.get(NodeRow, node)
            return row.incarnation if row is not None else None

    def wait_node(self, node: str, timeout: float = 90) -> None:
        """Until the worker last started as `node` has registered (a new node: and beaten twice). A node
        started again keeps its row, status "up" and its beat counting on, so only its new incarnation
        tells that the new worker is there."""
        from quanta.db.cluster import NodeRow

        before = self._incarnations.get(node)

        def up() -> bool:
            assert self.procs[node].poll() is None, f"worker {node} exited: {self.log(node)[-3000:]}"
            with self.store.session() as s:
                row = s.get(NodeRow, node)
                return row is not None and row.incarnation != before and row.status == "up" and row.beat > 2

        wait_for(up, timeout, f"node {node} to register")

    def controller(self, name: str = "controller") -> subprocess.Popen:
        return self._spawn(
            name,
            [
                *("controller", "--broker", self.redis.url, "--db", self.db_url),
                *("--checkpoints", str(self.checkpoints), "--dead-after", str(DEAD_AFTER_S)),
                *("--action-timeout", str(ACTION_TIMEOUT_S), "--verbose"),
            ],
        )

    def serve(self, port: int, token: str) -> subprocess.Popen:
        """`quanta serve --broker`: the API and the controller in one process (stop the controller first)."""
        return self._spawn(
            "serve",
            [
                *("serve", "--host", "127.0.0.1", "--port", str(port), "--db", self.db_url),
                *("--broker", self.redis.url, "--workdir", str(self.checkpoints)),
            ],
            QUANTA_TOKEN=token,
        )

    def stop(self, name: str, timeout: float = 30) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs_text(self) -> str:
        parts = [f"===== {p.name} =====\n{p.read_text(errors='replace')[-6000:]}" for p in self.logs.glob("*.log")]
        return "\n".join(parts)

    def submit(self, spec: dict[str, Any]) -> int:
        from quanta.spec import parse_spec

        parsed = parse_spec(spec)
        row = self.store.create_search(parsed.name, parsed.model_dump(mode="json"), time.time())
        assert row.id is not None
        return row.id

    def search(self, sid: int):  # noqa: ANN201
        return self.store.search(sid)

    def trials(self, sid: int):  # noqa: ANN201
        return self.store.trials(sid)

    def wait_search(self, sid: int, timeout: float) -> Any:
        def done() -> Any:
            for name, p in self.procs.items():
                if name in ("controller", "serve") and p.poll() not in (None, 0, -9, -15):
                    raise AssertionError(f"{name} exited with {p.returncode}:\n{self.log(name)[-4000:]}")
            row = self.search(sid)
            return row if row is not None and row.status in ("completed", "stopped", "failed") else None

        try:
            return wait_for(done, timeout, f"search {sid} to end", every=0.5)
        except AssertionError:
            print(self.logs_text())
            raise

    def node_trials(self, node: str) -> dict[int, dict[str, Any]]:
        from quanta.db.cluster import NodeRow

        with self.store.session() as s:
            row = s.get(NodeRow, node)
            return {int(k): v for k, v in (row.residency if row else {}).items()}

    def audit_records(self, audit: Path) -> dict[int, list[dict[str, Any]]]:
        out: dict[int, list[dict[str, Any]]] = {}
        for f in audit.glob("trial-*.jsonl"):
            tid = int(f.stem.split("-")[1])
            out[tid] = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        return out

    @staticmethod
    def doubles(audit: Path) -> list[str]:
        return sorted(p.name for p in audit.glob("DOUBLE-*"))

    def ensure(self, nodes: tuple[str, ...] = ("n1", "n2")) -> None:
        if self.redis.proc is None or self.redis.proc.poll() is not None:
            self.redis.start()
        started = []
        for node in nodes:
            if node not in self.procs or self.procs[node].poll() is not None:
                self.worker(node, wait=False)
                started.append(node)
        if "controller" not in self.procs or self.procs["controller"].poll() is not None:
            self.controller()
        for node in started:
            self.wait_node(node)

    def close(self) -> None:
        for name in list(self.procs):
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 15
        for p in self.procs.values():
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self._store is not None:
            self._store.engine.dispose()


@pytest.fixture(scope="session")
def _cluster(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Iterator[Cluster]:
    why = services_missing()
    if why:
        pytest.skip(why)
    redis = RedisServer().start()
    c = Cluster(tmp_path_factory.mktemp("cluster"), redis, postgres.create_database())
    try:
        yield c
    finally:
        c.close()
        redis.stop()


@pytest.fixture
def cluster(_cluster: Cluster) -> Cluster:
    """The shared cluster (two nodes of 2 CPU devices, a controller), with anything an earlier test
    killed started again: starting workers costs seconds, so the tests share them."""
    _cluster.ensure()
    return _cluster


def fault_spec(audit: Path, **over: Any) -> dict[str, Any]:
    """A search that never reaches its target, so every trial runs to its end: a fault must not lose one."""
    spec: dict[str, Any] = {
        "name": "faults",
        "trainable": "tests.distributed.trainables:guarded",
        "space": {"lr": {"loguniform": [0.001, 0.1]}},
        "metric": {"name": "accuracy", "goal": "maximize", "target": 2.0},
        "budget": {"max_trials": 8, "max_steps": 150, "max_seconds": 600},
        "parallelism": 6,
        "search": {"algorithm": "random"},
        "scheduler": {
            "policy": "timeslice",
            "quantum_s": 1.0,
            "checkpoint_every_quanta": 1,
            "checkpoint_every_s": 1.0,
            "max_retries": 5,
        },
        "config": {"audit_dir": str(audit), "sleep_s": 0.02, "report_every": 10},
    }
    spec.update(over)
    return spec
