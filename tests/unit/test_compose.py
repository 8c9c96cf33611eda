"""docker-compose.yml (and the Dockerfile it builds) say only what the code understands.

Every environment variable set for the app must be a `Settings` field (a typo would be silently
ignored: `extra="ignore"`), the database must be Postgres with pgvector, and the services must
start in order. `docker compose config` also validates the file when Docker Compose is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import build_parser
from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SETTINGS_VARS = {name.upper() for name in Settings.model_fields}
# Variables of the official postgres image (and so of pgvector/pgvector).
POSTGRES_VARS = {
    "POSTGRES_USER",
    "POSTGRES_PASSWORD",
    "POSTGRES_DB",
    "POSTGRES_INITDB_ARGS",
    "POSTGRES_INITDB_WALDIR",
    "POSTGRES_HOST_AUTH_METHOD",
    "PGDATA",
}
# Set by the Dockerfile for Python and pip, not for the app.
IMAGE_VARS = {
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "PIP_NO_CACHE_DIR",
    "PIP_DISABLE_PIP_VERSION_CHECK",
}
APP_SERVICES = ("migrate", "api", "worker")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())  # resolves the `<<: *app` merge keys
    assert isinstance(document, dict)
    return document


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):  # the `- NAME=value` form
        env = dict(item.split("=", 1) for item in env)
    assert isinstance(env, dict)
    return {str(k): str(v) for k, v in env.items()}


def test_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) >= {"db", "migrate", "api", "worker"}
    assert "pgvector" in services["db"]["image"]
    for name in APP_SERVICES:
        assert services[name]["build"] == ".", name
        assert services[name]["image"] == services["api"]["image"], name


def test_app_services_run_real_cli_commands(compose: dict[str, Any]) -> None:
    parser = build_parser()
    expected = {"migrate": "migrate", "api": "api", "worker": "worker"}
    for name, subcommand in expected.items():
        command = compose["services"][name]["command"]
        assert command[0] == "agent-runtime" and command[1] == subcommand, command
        assert parser.parse_args(command[1:]).command == subcommand


def test_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully", name
    assert "healthcheck" in services["db"]


def test_app_environment_is_settings_fields(compose: dict[str, Any]) -> None:
    for name in APP_SERVICES:
        env = environment(compose["services"][name])
        assert "DATABASE_URL" in env, name
        unknown = set(env) - SETTINGS_VARS
        assert not unknown, f"{name} sets variables no setting reads: {sorted(unknown)}"
        assert "@db:5432/" in env["DATABASE_URL"]  # the compose service, not localhost


def test_app_services_can_run_the_sandbox(compose: dict[str, Any]) -> None:
    """What bubblewrap needs from Docker, and nothing more (docs/deployment.md#docker)."""
    for name in ("api", "worker"):
        service = compose["services"][name]
        options = service["security_opt"]
        seccomp = [o.removeprefix("seccomp=") for o in options if o.startswith("seccomp=")]
        assert len(seccomp) == 1 and (ROOT / seccomp[0]).is_file(), options  # not unconfined
        assert "systempaths=unconfined" in options  # bwrap --proc: no masked /proc
        assert any(o.startswith("apparmor=") for o in options)  # docker-default denies mount
        assert "no-new-privileges:true" in options
        assert not {"privileged", "cap_add", "user"} & set(service), name  # the image's uid
    assert "security_opt" not in compose["services"]["migrate"]  # runs no code tools


def test_app_services_outlive_their_shutdown_grace(compose: dict[str, Any]) -> None:
    """Docker kills a container `stop_grace_period` after SIGTERM (default 10 s)."""
    for name in ("api", "worker"):
        service = compose["services"][name]
        configured = environment(service).get("SHUTDOWN_GRACE_SECONDS")
        grace = float(configured or Settings.model_fields["shutdown_grace_seconds"].default)
        period = re.fullmatch(r"(\d+)s", service["stop_grace_period"])
        assert period, service["stop_grace_period"]
        assert int(period.group(1)) >= grace + 10, name


def test_db_environment_is_postgres_variables(compose: dict[str, Any]) -> None:
    unknown = set(environment(compose["services"]["db"])) - POSTGRES_VARS
    assert not unknown, sorted(unknown)


def test_interpolated_variables_are_known(compose: dict[str, Any]) -> None:
    """`${NAME:-default}` reads NAME from the shell or `.env`: it must mean something too."""
    names = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", COMPOSE.read_text()))
    assert names, "no interpolation found: the pattern is wrong"
    assert not names - SETTINGS_VARS - POSTGRES_VARS, sorted(names - SETTINGS_VARS - POSTGRES_VARS)


def test_dockerfile_environment_is_settings_fields() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    names = {
        name
        for line in dockerfile.splitlines()
        if line.startswith("ENV ")
        for name in re.findall(r"([A-Z_][A-Z0-9_]*)=", line)
    }
    assert {"HOST", "PORT"} <= names
    assert not names - SETTINGS_VARS - IMAGE_VARS, sorted(names - SETTINGS_VARS - IMAGE_VARS)


def _compose_command() -> list[str] | None:
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run(
            [*command, "version"], capture_output=True, text=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return command
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("Docker Compose is not installed")
    out = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
