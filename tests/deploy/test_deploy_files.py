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


# Custom resources of other projects (the Prometheus Operator's ServiceMonitor): not in the
# Kubernetes schema, and shipped only as examples, not applied by kustomization.yaml.
FOREIGN_API_GROUPS = ("monitoring.coreos.com/",)


def _core_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, document)
        for name, document in _documents()
        if not document["apiVersion"].startswith(FOREIGN_API_GROUPS)
    ]


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
    assert {"postgres", "redis", "web", "worker-watch", "worker", "beat", "mailpit"} <= set(
        services
    )
    for name in ("postgres", "redis", "web", "worker-watch", "worker", "beat", "mailpit"):
        assert "healthcheck" in services[name], name
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]


@pytest.mark.parametrize(
    ("file_name", "document"), _core_documents(), ids=lambda value: str(value)[:40]
)
def test_manifest_matches_the_kubernetes_schema(file_name: str, document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest_but_the_examples() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    on_disk = {
        path.name for path in MANIFESTS.glob("*.yaml") if not path.name.endswith(".example.yaml")
    } - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk
    assert {"secret.example.yaml", "servicemonitor.example.yaml"} <= {
        path.name for path in MANIFESTS.glob("*.example.yaml")
    }


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


def test_configuration_comes_from_a_secret_and_a_config_map() -> None:
    for deployment in _by_kind("Deployment"):
        sources = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        assert {"configMapRef": {"name": "lease-dashboard"}} in sources
        assert {"secretRef": {"name": "lease-dashboard"}} in sources


def test_metrics_are_not_opened_to_private_addresses_and_forwarded_for_is_not_believed() -> None:
    """Behind the ingress every request comes from a private pod address: allowing private
    ranges allowed the internet. Production needs the token; no range is configured."""
    (config_map,) = _by_kind("ConfigMap")
    assert "METRICS_ALLOWED_IPS" not in config_map["data"]
    assert config_map["data"]["TRUSTED_PROXY_CIDRS"] == ""
    (secret,) = _by_kind("Secret")
    assert "METRICS_TOKEN" in secret["stringData"]


def test_prometheus_scrapes_with_the_secrets_metrics_token() -> None:
    (monitor,) = _by_kind("ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "lease-dashboard", "key": "METRICS_TOKEN"},
    }
    web_service = next(
        service
        for service in _by_kind("Service")
        if service["metadata"]["labels"]["app.kubernetes.io/component"] == "web"
    )
    assert monitor["spec"]["selector"]["matchLabels"] == web_service["metadata"]["labels"]
    assert endpoint["port"] in {port["name"] for port in web_service["spec"]["ports"]}
