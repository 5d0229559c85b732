"""The deployment files are checked offline: compose by docker-compose, manifests by schema."""

from __future__ import annotations

import ipaddress
import re
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


def test_docker_compose_has_every_service_with_health_checks() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    names = ("postgres", "redis", "web", "worker-watch", "worker", "worker-alerts", "beat")
    names += ("mailpit",)
    assert set(names) <= set(services)
    for name in names:
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


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (document["metadata"]["name"], document["spec"]["template"]["spec"])
        for document in _by_kind("Deployment") + _by_kind("Job")
    ]


def test_only_the_watch_worker_gets_a_service_account_token() -> None:
    """A token in a pod that never calls the Kubernetes API is only something to steal."""
    mounted = {name: spec.get("automountServiceAccountToken", True) for name, spec in _pod_specs()}
    assert mounted.pop("lease-dashboard-worker-watch") is True
    assert mounted and not any(mounted.values()), mounted
    for name, spec in _pod_specs():
        if name != "lease-dashboard-worker-watch":
            assert "serviceAccountName" not in spec, name


def test_every_pod_runs_unprivileged_on_a_read_only_root_filesystem() -> None:
    for name, spec in _pod_specs():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            for mount in container.get("volumeMounts", []):
                assert "emptyDir" in volumes[mount["name"]], name


def _ip_blocks(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        peer["ipBlock"]
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
    ]


def test_the_egress_policy_allows_named_destinations_only_and_never_the_metadata_service() -> None:
    (policy,) = _by_kind("NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/part-of": "lease-dashboard"
    }
    ports = set()
    for rule in policy["spec"]["egress"]:
        # A rule without `to` or `ports` allows every destination or every port.
        assert rule.get("to") and rule.get("ports"), rule
        ports |= {port["port"] for port in rule["ports"]}
    assert {53, 5432, 6379, 587, 443, 6443} <= ports
    metadata = ipaddress.ip_address("169.254.169.254")
    for block in _ip_blocks(policy):
        if metadata in ipaddress.ip_network(block["cidr"]):
            excepted = [ipaddress.ip_network(cidr) for cidr in block.get("except", [])]
            assert any(metadata in network for network in excepted), block
    # The placeholders are documentation ranges, so an unedited copy reaches nothing.
    documentation = [
        ipaddress.ip_network(cidr) for cidr in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
    ]
    for block in _ip_blocks(policy):
        network = ipaddress.ip_network(block["cidr"])
        assert any(network.subnet_of(range_) for range_ in documentation), block
