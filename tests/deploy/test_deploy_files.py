"""The deployment files are checked offline: compose by docker-compose, manifests by schema."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO_ROOT

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30.0"


def _documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents.append((path.name, document))
    return documents


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [document for _, document in _documents() if document["kind"] == kind]


def _deployment(component: str) -> dict[str, Any]:
    (deployment,) = [
        document
        for document in _by_kind("Deployment")
        if document["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return deployment


def test_docker_compose_file_is_valid(docker_compose: list[str]) -> None:
    env = {**os.environ, "SECRET_KEY": "x" * 60, "SECRETS_ENCRYPTION_KEYS": "k" * 44}
    result = subprocess.run(
        [*docker_compose, "-f", str(REPO_ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_docker_compose_has_every_service_with_health_checks() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    names = ("postgres", "redis", "web", "worker-watch", "worker", "worker-alerts", "beat")
    names += ("mailpit",)
    assert set(names) <= set(services)
    for name in names:
        assert "healthcheck" in services[name], name
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]


@pytest.mark.parametrize(("file_name", "document"), _documents(), ids=lambda value: str(value)[:40])
def test_manifest_matches_the_kubernetes_schema(file_name: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    on_disk = {path.name for path in MANIFESTS.glob("*.yaml")} - {
        "kustomization.yaml",
        "secret.example.yaml",
    }
    assert set(kustomization["resources"]) == on_disk


READ_ONLY_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases", "leasecandidates"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
]


def test_cluster_role_only_reads_leases_candidates_and_nodes() -> None:
    (role,) = _by_kind("ClusterRole")
    assert role["rules"] == READ_ONLY_RULES


def test_readme_grants_what_the_deployed_cluster_role_grants() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, flags=re.DOTALL)
    roles = [
        document
        for block in blocks
        for document in yaml.safe_load_all(block)
        if isinstance(document, dict) and document.get("kind") == "ClusterRole"
    ]
    assert [role["rules"] for role in roles] == [READ_ONLY_RULES]


def test_web_runs_two_replicas_with_health_and_readiness_probes() -> None:
    web = _deployment("web")
    assert web["spec"]["replicas"] == 2
    container = web["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert _by_kind("Service")


def test_beat_runs_exactly_once() -> None:
    beat = _deployment("beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"


def test_workers_consume_their_own_queues_and_watchers_use_threads() -> None:
    watch = _deployment("worker-watch")["spec"]["template"]["spec"]
    default = _deployment("worker")["spec"]["template"]["spec"]["containers"][0]["command"]
    watch_command = watch["containers"][0]["command"]
    assert watch_command[watch_command.index("--queues") + 1] == "watch"
    assert watch_command[watch_command.index("--pool") + 1] == "threads"
    assert default[default.index("--queues") + 1] == "default"
    assert watch["serviceAccountName"] == "lease-dashboard"


def _queues_of(command: list[str]) -> str:
    return command[command.index("--queues") + 1]


def test_every_queue_has_a_worker_in_each_way_to_run_the_dashboard() -> None:
    from dashboard.celery import QUEUES

    procfile = [
        line.split(":", 1)[1].split()
        for line in (REPO_ROOT / "Procfile").read_text().splitlines()
        if " worker " in line
    ]
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())["services"]
    deployments = [
        document["spec"]["template"]["spec"]["containers"][0]["command"]
        for document in _by_kind("Deployment")
    ]
    ways = {
        "Procfile": [_queues_of(command) for command in procfile],
        "docker-compose.yml": [
            _queues_of(service["command"])
            for service in compose.values()
            if "worker" in service.get("command", [])
        ],
        "deploy/kubernetes": [_queues_of(c) for c in deployments if "worker" in c],
    }
    for way, queues in ways.items():
        assert sorted(queues) == sorted(QUEUES), way


def test_the_alerts_worker_is_a_prefork_worker_without_a_kubernetes_token() -> None:
    # Celery enforces time limits in prefork workers only: the alerts tasks rely on them.
    spec = _deployment("worker-alerts")["spec"]["template"]["spec"]
    command = spec["containers"][0]["command"]
    assert _queues_of(command) == "alerts" and "--pool" not in command
    assert spec["automountServiceAccountToken"] is False


def test_configuration_comes_from_a_secret_and_a_config_map() -> None:
    for deployment in _by_kind("Deployment"):
        sources = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        assert {"configMapRef": {"name": "lease-dashboard"}} in sources
        assert {"secretRef": {"name": "lease-dashboard"}} in sources
