"""deploy/k8s/ (and the Dockerfile it runs) say only what the code understands.

Every manifest is a valid Kubernetes object (the API's own JSON schemas, bundled offline by
`kubernetes-validate`); every variable the app containers get is a `Settings` field and parses
as one; commands are real CLI subcommands; probes point at real routes on the port the app
listens on; the image is the Dockerfile's; the worker outlives its shutdown grace; and the pods
running code tools get what bubblewrap needs (docs/deployment.md#kubernetes).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.api.app import create_app
from app.cli import build_parser
from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SETTINGS_VARS = {name.upper() for name in Settings.model_fields}
KUBERNETES_VERSION = "1.33.0"  # the oldest release with user namespaces on by default
APP_COMMANDS = {"agent-runtime-api": "api", "agent-runtime-worker": "worker"}
JOB_COMMANDS = {"agent-runtime-migrate": "migrate"}
IMAGE = "agent-runtime"
"""The image name the manifests use; kustomization.yaml `images` points it at a registry."""


def _documents() -> list[dict[str, Any]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            assert isinstance(document, dict), path
            found.append(document)
    return found


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return _documents()


@pytest.fixture(scope="module")
def kustomization() -> dict[str, Any]:
    document = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert isinstance(document, dict)
    return document


def _one(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def _workloads(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Deployments and Jobs by name."""
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] in ("Deployment", "Job")}


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, workload["metadata"]["name"]
    container = containers[0]
    assert isinstance(container, dict)
    return container


def _config(manifests: list[dict[str, Any]]) -> dict[str, str]:
    data = _one(manifests, "ConfigMap", "agent-runtime-config")["data"]
    return {str(k): str(v) for k, v in data.items()}


def _secret_keys() -> dict[str, str]:
    """Keys of secrets.env.example (commented-out ones too: they are documented options)."""
    keys = {}
    for line in (K8S / "secrets.env.example").read_text().splitlines():
        match = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line)
        if match:
            keys[match.group(1)] = match.group(2)
    return keys


def test_kustomization_lists_every_manifest(kustomization: dict[str, Any]) -> None:
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    generated = {g["name"]: g for g in kustomization["secretGenerator"]}
    assert generated["agent-runtime-secrets"]["envs"] == ["secrets.env"]
    assert "deploy/k8s/secrets.env" in (ROOT / ".gitignore").read_text().splitlines()
    assert [image["name"] for image in kustomization["images"]] == [IMAGE]


@pytest.mark.parametrize(
    "document", _documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_manifest_is_a_valid_kubernetes_object(document: dict[str, Any]) -> None:
    # strict: an unknown field (a typo, or one newer than this version) is an error too.
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prots": []}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_containers_run_real_cli_commands(manifests: list[dict[str, Any]]) -> None:
    parser = build_parser()
    workloads = _workloads(manifests)
    assert set(workloads) == set(APP_COMMANDS) | set(JOB_COMMANDS)
    for name, subcommand in {**APP_COMMANDS, **JOB_COMMANDS}.items():
        container = _container(workloads[name])
        command = [*container["command"], *container.get("args", [])]
        assert command[:2] == ["agent-runtime", subcommand], shlex.join(command)
        assert parser.parse_args(command[1:]).command == subcommand
    assert workloads["agent-runtime-migrate"]["kind"] == "Job"


def test_environment_is_settings_fields(manifests: list[dict[str, Any]]) -> None:
    config, secrets = _config(manifests), _secret_keys()
    assert not set(config) - SETTINGS_VARS, sorted(set(config) - SETTINGS_VARS)
    assert not set(secrets) - SETTINGS_VARS, sorted(set(secrets) - SETTINGS_VARS)
    assert "DATABASE_URL" in secrets and "SUPABASE_JWT_SECRET" in secrets
    for workload in _workloads(manifests).values():
        container = _container(workload)
        explicit = {item["name"] for item in container.get("env", [])}
        assert not explicit - SETTINGS_VARS, sorted(explicit - SETTINGS_VARS)
        sources = container["envFrom"]
        assert {"configMapRef": {"name": "agent-runtime-config"}} in sources
        assert {"secretRef": {"name": "agent-runtime-secrets"}} in sources


def test_environment_parses_as_settings(
    manifests: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The values too: a `SANDBOX_MODE: bubblewrp` would stop every pod at start-up."""
    for name in SETTINGS_VARS:
        monkeypatch.delenv(name, raising=False)
    active = {k: v for k, v in _secret_keys().items() if v}
    for key, value in {**active, **_config(manifests)}.items():
        monkeypatch.setenv(key, value)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.host == "0.0.0.0"
    assert settings.sandbox_mode == "bubblewrap"
    assert settings.database_url and settings.database_url.startswith("postgresql://")


def test_probes_point_at_real_routes_on_the_app_port(manifests: list[dict[str, Any]]) -> None:
    paths = create_app(Settings()).openapi()["paths"]
    routes = {path for path, operations in paths.items() if "get" in operations}
    api = _container(_one(manifests, "Deployment", "agent-runtime-api"))
    ports = {port["name"]: port["containerPort"] for port in api["ports"]}
    config = _config(manifests)
    assert ports == {"http": int(config["PORT"]), "metrics": int(config["METRICS_PORT"])}
    assert api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = api[probe]["httpGet"]
        assert get["path"] in routes, get
        assert get["port"] in ports, get
    service = _one(manifests, "Service", "agent-runtime-api")
    assert [port["targetPort"] for port in service["spec"]["ports"]] == ["http"]


def test_selectors_match_their_pods(manifests: list[dict[str, Any]]) -> None:
    api = _one(manifests, "Deployment", "agent-runtime-api")
    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        document = _one(manifests, kind, "agent-runtime-api")
        selector = document["spec"]["selector"]
        selector = selector.get("matchLabels", selector)
        assert selector.items() <= pod_labels.items(), kind
    for workload in _workloads(manifests).values():
        if workload["kind"] == "Deployment":
            labels = workload["spec"]["template"]["metadata"]["labels"]
            assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = _one(manifests, "HorizontalPodAutoscaler", "agent-runtime-api")["spec"]
    assert target["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "agent-runtime-api",
    }
    assert target["minReplicas"] >= 2  # one replica down (rollout, node drain) keeps serving


def test_image_is_the_dockerfiles(manifests: list[dict[str, Any]]) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert compose["services"]["api"]["build"] == "."  # the Dockerfile at the root
    assert compose["services"]["api"]["image"].split(":")[0] == IMAGE
    for workload in _workloads(manifests).values():
        assert _container(workload)["image"] == IMAGE, workload["metadata"]["name"]


def test_worker_outlives_its_shutdown_grace(manifests: list[dict[str, Any]]) -> None:
    grace = float(_config(manifests)["SHUTDOWN_GRACE_SECONDS"])
    assert grace > Settings.model_fields["shutdown_grace_seconds"].default
    worker = _one(manifests, "Deployment", "agent-runtime-worker")["spec"]["template"]["spec"]
    # Margin for handing unfinished runs back to the queue after the grace.
    assert worker["terminationGracePeriodSeconds"] >= grace + 10
    # The API drains connections for SHUTDOWN_GRACE_SECONDS too (uvicorn's graceful timeout).
    api = _one(manifests, "Deployment", "agent-runtime-api")["spec"]["template"]["spec"]
    assert api["terminationGracePeriodSeconds"] >= grace + 5


def _dockerfile_uid() -> int:
    match = re.search(r"useradd\b[^\n]*--uid (\d+) app", (ROOT / "Dockerfile").read_text())
    assert match, "the Dockerfile's app user"
    return int(match.group(1))


@pytest.mark.parametrize("name", sorted(APP_COMMANDS))
def test_pods_running_code_tools_get_what_bubblewrap_needs(
    manifests: list[dict[str, Any]], name: str
) -> None:
    pod = _one(manifests, "Deployment", name)["spec"]["template"]["spec"]
    container = _container(_one(manifests, "Deployment", name))
    security = container["securityContext"]
    # Own user namespace: the unmasked /proc bwrap's fresh procfs needs is then the pod's own.
    assert pod["hostUsers"] is False
    assert security["procMount"] == "Unmasked"
    # The runtime's default seccomp profile and AppArmor's docker-default refuse unshare/mount.
    assert pod["securityContext"]["seccompProfile"]["type"] in ("Unconfined", "Localhost")
    assert security["appArmorProfile"]["type"] in ("Unconfined", "Localhost")
    # ...and nothing more: no root, no capabilities, no setuid.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == _dockerfile_uid()
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in security
    assert pod["automountServiceAccountToken"] is False  # code in the sandbox's pod: no API token
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert "/tmp" in mounts  # sandbox workspaces, under a read-only root filesystem


def test_dockerfile_installs_bubblewrap_without_setuid() -> None:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    runs = [line[len("RUN ") :] for line in text.splitlines() if line.startswith("RUN ")]
    installs = [r for r in runs if re.search(r"apt-get install\b[^&;]*\bbubblewrap\b", r)]
    assert installs, "no `apt-get install … bubblewrap`"
    assert "chmod u-s /usr/bin/bwrap" in installs[0]
    assert "bwrap --version" in installs[0]  # the build fails if bwrap did not land on PATH
    users = re.findall(r"^USER (\S+)$", text, flags=re.M)
    assert users and users[-1] not in ("root", "0"), users
    assert re.search(r"^FROM python:3\.\d+-slim", text, flags=re.M)  # Debian: apt, util-linux


def test_every_pod_is_scraped_on_the_metrics_port(manifests: list[dict[str, Any]]) -> None:
    """API and workers serve /metrics on METRICS_PORT, bound beyond loopback for the scraper,
    and the Service never exposes that port."""
    config = _config(manifests)
    assert config["METRICS_HOST"] == "0.0.0.0"
    for name in ("agent-runtime-api", "agent-runtime-worker"):
        deployment = _one(manifests, "Deployment", name)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == config["METRICS_PORT"]
        ports = {p["name"]: p["containerPort"] for p in _container(deployment)["ports"]}
        assert ports["metrics"] == int(config["METRICS_PORT"])
    service = _one(manifests, "Service", "agent-runtime-api")
    assert all(port["targetPort"] != "metrics" for port in service["spec"]["ports"])
