"""docker-compose.yml cannot be run here (no Docker): check its structure against the CLI instead. Every
command is a real `quanta` command with real options, the services agree on the database, the broker
and the shared checkpoint volume, and the stateful services have health checks. Issue 12 item 4: the
file is rendered with compose's interpolation rules to check that it refuses to start without its
secrets, keeps PostgreSQL and Redis private with passwords, and publishes only the API, on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml

from quanta.cli import app
from quanta.devices import parse_devices

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


SECRETS = ("QUANTA_TOKEN", "QUANTA_DB_PASSWORD", "QUANTA_REDIS_PASSWORD")
_VAR = re.compile(r"\$\$|\$\{([A-Za-z0-9_]+)(?:(:?[-?])([^}]*))?\}")


class MissingVariable(Exception):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation: `${VAR}`, `${VAR:-default}`, `${VAR:?error}` (refuses to start when VAR
    is unset or empty), `$$` for a literal `$`."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name)
        if op == ":?" and not value:
            raise MissingVariable(f"{name}: {arg}")
        if op == ":-" and not value:
            return arg
        return value or ""

    return _VAR.sub(one, text)


def rendered(env: dict[str, str]) -> dict:
    return yaml.safe_load(interpolate((ROOT / "docker-compose.yml").read_text(), env))


ENV = {"QUANTA_TOKEN": "tok-1a2b", "QUANTA_DB_PASSWORD": "dbpw-3c4d", "QUANTA_REDIS_PASSWORD": "rpw-5e6f"}


def test_services_share_database_broker_and_checkpoints(compose: dict) -> None:
    services = rendered(ENV)["services"]
    api = options(services["api"]["command"][2:])
    api_env = services["api"]["environment"]
    assert api_env["QUANTA_DB_URL"] == "postgresql://quanta:dbpw-3c4d@postgres:5432/quanta"
    assert api_env["QUANTA_BROKER"] == "redis://:rpw-5e6f@redis:6379/0"
    mounts = {m.split(":")[0]: m.split(":")[1] for m in services["api"]["volumes"]}
    assert mounts["checkpoints"] == api["--workdir"], "the controller's workdir must be the shared volume"
    assert "checkpoints" in compose["volumes"]
    nodes = set()
    for name, svc in workers(compose).items():
        opts = options(svc["command"][2:])
        wenv = services[name]["environment"]
        assert (wenv["QUANTA_DB_URL"], wenv["QUANTA_BROKER"]) == (api_env["QUANTA_DB_URL"], api_env["QUANTA_BROKER"])
        assert wenv["QUANTA_TRAINABLE_ALLOWLIST"] == api_env["QUANTA_TRAINABLE_ALLOWLIST"] == "examples."
        wmounts = {m.split(":")[0]: m.split(":")[1] for m in svc["volumes"]}
        assert wmounts["checkpoints"] == opts["--checkpoints"] == api["--workdir"], name
        assert "/" not in opts["--node"]
        nodes.add(opts["--node"])
        devices = default(opts["--devices"])
        if devices.startswith("cpu:"):
            assert parse_devices(devices)
    assert len(nodes) == len(workers(compose)), "node names must be unique"


@pytest.mark.parametrize("missing", SECRETS)
def test_compose_refuses_to_start_without_each_secret(missing: str) -> None:
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(MissingVariable, match=missing):
        rendered(env)
    with pytest.raises(MissingVariable, match=missing):
        rendered({**env, missing: ""})  # `:?` refuses an empty value too
    text = (ROOT / "docker-compose.yml").read_text()
    assert "change-me" not in text
    for m in _VAR.finditer(text):
        if m.group(1) in SECRETS:
            assert m.group(2) == ":?", f"${{{m.group(1)}}} must be required (:?), not {m.group(0)}"


def test_postgres_and_redis_are_private_and_only_the_api_is_published_on_loopback() -> None:
    doc = rendered(ENV)
    services, networks = doc["services"], doc["networks"]
    for name in ("postgres", "redis"):
        assert "ports" not in services[name], f"{name} must not be published on the host"
        assert services[name]["networks"] == ["backend"], name
    assert networks["backend"]["internal"] is True
    published = {name for name, svc in services.items() if svc.get("ports")}
    assert published == {"api"}
    [port] = services["api"]["ports"]
    assert port == "127.0.0.1:8000:8000"
    assert rendered({**ENV, "QUANTA_API_BIND": "0.0.0.0"})["services"]["api"]["ports"] == ["0.0.0.0:8000:8000"]
    assert not networks["frontend"].get("internal")  # the API's port needs a network that is not internal


def test_redis_and_postgres_take_their_passwords_from_the_environment() -> None:
    services = rendered(ENV)["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "dbpw-3c4d"
    redis = services["redis"]
    assert redis["environment"]["REDIS_PASSWORD"] == "rpw-5e6f"
    script = redis["command"][-1]
    assert "requirepass %s" in script and '"$REDIS_PASSWORD"' in script and "redis-server /tmp/redis.conf" in script
    assert "REDISCLI_AUTH" in redis["healthcheck"]["test"][1]


def test_no_secret_is_on_a_command_line() -> None:
    """Every user of the host reads command lines (`ps`): the token and passwords go in environments."""
    services = rendered(ENV)["services"]
    for name, svc in services.items():
        command = " ".join(svc.get("command", []))
        for secret in ENV.values():
            assert secret not in command, f"service {name} has a secret on its command line"
        assert "--db" not in command and "--broker" not in command, name
    assert services["api"]["environment"]["QUANTA_TOKEN"] == "tok-1a2b"


def test_gpu_reservation_is_documented() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "driver: nvidia" in text and "capabilities: [gpu]" in text and "cuda:all" in text
