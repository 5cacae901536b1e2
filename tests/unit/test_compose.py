"""docker-compose.yml cannot be run here (no Docker): check its structure against the CLI instead. Every
command is a real `quanta` command with real options, the services agree on the database, the broker
and the shared checkpoint volume, and the stateful services have health checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml

from app.cli import app
from app.devices import parse_devices

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def options(command: list[str]) -> dict[str, str | None]:
    """`--name=value` / `--name value` / `--flag` of a command line."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(command):
        arg = command[i]
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if not eq and i + 1 < len(command) and not command[i + 1].startswith("--"):
                value, i = command[i + 1], i + 1
            out[name] = value if (eq or value) else None
        i += 1
    return out


def default(value: str) -> str:
    """The value with `${VAR:-default}` interpolations replaced by their defaults."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def cli_options(name: str) -> set[str]:
    group = typer.main.get_command(app)
    cmd = group.commands.get(name)  # type: ignore[attr-defined]
    assert cmd is not None, f"`quanta {name}` does not exist"
    return {o for p in cmd.params for o in p.opts if o.startswith("--")}


def workers(compose: dict) -> dict[str, dict]:
    return {k: v for k, v in compose["services"].items() if v.get("command", [])[:2] == ["quanta", "worker"]}


def test_services(compose: dict) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "api"} <= set(services)
    assert len(workers(compose)) >= 1
    for name in ("postgres", "redis"):
        assert "test" in services[name]["healthcheck"], f"{name} needs a health check"
    assert services["api"]["command"][:2] == ["quanta", "serve"]
    for name, svc in [("api", services["api"]), *workers(compose).items()]:
        deps = svc["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name


def test_commands_use_real_cli_options(compose: dict) -> None:
    for name, svc in compose["services"].items():
        command = svc.get("command")
        if not command or command[0] != "quanta":
            continue
        known = cli_options(command[1])
        unknown = set(options(command[2:])) - known
        assert not unknown, f"service {name}: `quanta {command[1]}` has no options {sorted(unknown)}"


def test_services_share_database_broker_and_checkpoints(compose: dict) -> None:
    services = compose["services"]
    api = options(services["api"]["command"][2:])
    assert api["--db"].startswith("postgresql://") and "@postgres:" in api["--db"]
    assert api["--broker"].startswith("redis://redis:")
    mounts = {m.split(":")[0]: m.split(":")[1] for m in services["api"]["volumes"]}
    assert mounts["checkpoints"] == api["--workdir"], "the controller's workdir must be the shared volume"
    assert "checkpoints" in compose["volumes"]
    nodes = set()
    for name, svc in workers(compose).items():
        opts = options(svc["command"][2:])
        assert opts["--db"] == api["--db"] and opts["--broker"] == api["--broker"], name
        wmounts = {m.split(":")[0]: m.split(":")[1] for m in svc["volumes"]}
        assert wmounts["checkpoints"] == opts["--checkpoints"] == api["--workdir"], name
        assert "/" not in opts["--node"]
        nodes.add(opts["--node"])
        devices = default(opts["--devices"])
        if devices.startswith("cpu:"):
            assert parse_devices(devices)
    assert len(nodes) == len(workers(compose)), "node names must be unique"


def test_gpu_reservation_is_documented() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "driver: nvidia" in text and "capabilities: [gpu]" in text and "cuda:all" in text
