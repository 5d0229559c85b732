"""The Helm chart: linted and rendered by Helm's library, every object checked by schema.

Two value sets are rendered: the chart's defaults and deploy/helm/values.production.example.yaml
(ingress, HPA, egress policy and ServiceMonitor on). The assertions are the ones Pod Security
"restricted", a reviewer and an on-call engineer care about; the README records the same
render applied to a real API server with server-side dry run.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.deploy.helm import (
    CHART,
    KUBERNETES_VERSION,
    NAMESPACE,
    Manifest,
    component,
    deployment,
    of_kind,
    pod_specs,
    production_values,
    render,
)

CASES = {"defaults": lambda: {}, "production example": production_values}
# Custom resources of other projects: not in the Kubernetes schema.
FOREIGN_API_GROUPS = ("monitoring.coreos.com/",)
WORKERS = ("worker-watch", "worker", "worker-alerts")
ALIVE_FILES = {name: "/tmp/celery-worker-alive" for name in WORKERS} | {
    "beat": "/tmp/celery-beat-alive"
}
METADATA_SERVICE = ipaddress.ip_address("169.254.169.254")


@pytest.fixture(params=list(CASES), ids=list(CASES))
def values(request: pytest.FixtureRequest) -> dict[str, Any]:
    return CASES[request.param]()


@pytest.fixture
def manifests(values: dict[str, Any]) -> list[Manifest]:
    return render(values)


def _hook(manifest: Manifest) -> str | None:
    return (manifest["metadata"].get("annotations") or {}).get("helm.sh/hook")


def test_the_chart_lints_clean_with_its_defaults_and_the_example(values: dict[str, Any]) -> None:
    report = helm_python.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert report["errors"] == []
    # Severity 1 is information ("icon is recommended"); 2 and 3 are warnings and errors.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    assert report["total_charts_linted"] == 1


def test_every_object_matches_the_kubernetes_schema(manifests: list[Manifest]) -> None:
    checked = 0
    for manifest in manifests:
        if manifest["apiVersion"].startswith(FOREIGN_API_GROUPS):
            continue
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= 15


def test_the_release_has_every_part(values: dict[str, Any], manifests: list[Manifest]) -> None:
    kinds = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    expected = {
        ("Deployment", "lease-dashboard-web"),
        ("Service", "lease-dashboard-web"),
        ("Deployment", "lease-dashboard-worker-watch"),
        ("Deployment", "lease-dashboard-worker"),
        ("Deployment", "lease-dashboard-worker-alerts"),
        ("Deployment", "lease-dashboard-beat"),
        ("Job", "lease-dashboard-migrate"),
        ("ServiceAccount", "lease-dashboard"),
        ("Pod", "lease-dashboard-test-readyz"),
    }
    assert expected <= kinds
    # Nothing holds a secret: the Secret is the operator's, made before the install.
    assert not of_kind(manifests, "Secret") and not of_kind(manifests, "ConfigMap")
    for manifest in manifests:
        if manifest["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert manifest["metadata"]["namespace"] == NAMESPACE, manifest["metadata"]


def test_every_pod_passes_pod_security_restricted(manifests: list[Manifest]) -> None:
    specs = pod_specs(manifests)
    assert len(specs) == 7
    for name, spec in specs:
        context = spec["securityContext"]
        assert context["runAsNonRoot"] is True, name
        assert context["runAsUser"] == 10001, name
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, name
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        for container in spec["containers"] + spec.get("initContainers", []):
            container_context = container["securityContext"]
            assert container_context["readOnlyRootFilesystem"] is True, name
            assert container_context["allowPrivilegeEscalation"] is False, name
            assert container_context["capabilities"] == {"drop": ["ALL"]}, name
            assert "privileged" not in container_context, name
            # Writable places are emptyDirs only, never the image or the node.
            for mount in container.get("volumeMounts", []):
                assert "emptyDir" in volumes[mount["name"]], name
            assert "hostPath" not in json.dumps(spec), name


def test_every_container_requests_cpu_and_memory_and_has_a_memory_limit(
    manifests: list[Manifest],
) -> None:
    for name, spec in pod_specs(manifests):
        for container in spec["containers"]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert "memory" in resources["limits"], name
            request = _mebibytes(resources["requests"]["memory"])
            assert _mebibytes(resources["limits"]["memory"]) >= request, name


def _mebibytes(quantity: str) -> int:
    assert quantity.endswith("Mi"), quantity
    return int(quantity[:-2])


def test_only_the_watch_worker_holds_a_service_account_token(manifests: list[Manifest]) -> None:
    """A token in a pod that never calls the Kubernetes API is only something to steal. Only
    the watcher talks to it (an `--in-cluster` cluster reads the pod's account)."""
    mounted = {name: spec["automountServiceAccountToken"] for name, spec in pod_specs(manifests)}
    assert mounted.pop("lease-dashboard-worker-watch") is True
    assert mounted and not any(mounted.values()), mounted
    for name, spec in pod_specs(manifests):
        if name == "lease-dashboard-worker-watch":
            assert spec["serviceAccountName"] == "lease-dashboard"
        else:
            assert "serviceAccountName" not in spec, name
    # The account itself mounts nothing by default: a pod must ask, as the watch worker does.
    (account,) = of_kind(manifests, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False


def test_without_in_cluster_watching_no_pod_holds_a_token_and_no_role_exists() -> None:
    manifests = render({"inCluster": {"enabled": False}})
    assert not any(spec["automountServiceAccountToken"] for _, spec in pod_specs(manifests))
    assert not [
        m for m in manifests if m["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    assert all("serviceAccountName" not in spec for _, spec in pod_specs(manifests))


READ_ONLY_RULES = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases", "leasecandidates"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
]


def test_the_cluster_role_only_reads_leases_candidates_and_nodes_for_the_watch_account() -> None:
    manifests = render()
    (role,) = of_kind(manifests, "ClusterRole")
    assert role["rules"] == READ_ONLY_RULES
    (binding,) = of_kind(manifests, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "lease-dashboard", "namespace": NAMESPACE}
    ]


def test_two_releases_in_two_namespaces_do_not_share_cluster_scoped_names() -> None:
    names = [
        {m["metadata"]["name"] for m in render(namespace=namespace) if m["kind"] == "ClusterRole"}
        for namespace in ("dashboard-staging", "dashboard-prod")
    ]
    assert names[0] and names[1] and not names[0] & names[1]


def test_migrate_runs_as_a_hook_before_every_install_and_upgrade(
    manifests: list[Manifest],
) -> None:
    """Helm runs pre-install/pre-upgrade hooks, and waits for the Job to succeed, before it
    applies the Deployments; before-hook-creation deletes the last run's Job first, so the
    same name with a new image applies at every upgrade (a Job's pod template is immutable)."""
    (job,) = of_kind(manifests, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation"
    spec = job["spec"]["template"]["spec"]
    assert spec["containers"][0]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert spec["restartPolicy"] == "Never"
    assert job["spec"]["activeDeadlineSeconds"] > 0
    # A hook runs before the release's other objects exist: it may use nothing of theirs,
    # so its settings are inline and only the operator's Secret is read.
    assert "configMapRef" not in json.dumps(spec)
    assert "serviceAccountName" not in spec
    # Only the migrate Job and the test pod are hooks; everything else is a release object.
    hooks = {m["metadata"]["name"]: _hook(m) for m in manifests if _hook(m)}
    assert hooks == {
        "lease-dashboard-migrate": "pre-install,pre-upgrade",
        "lease-dashboard-test-readyz": "test",
    }


def test_every_pod_reads_the_same_settings_and_the_operators_secret(
    manifests: list[Manifest],
) -> None:
    environments = []
    for name, spec in pod_specs(manifests):
        if name.endswith("test-readyz"):
            continue
        container = spec["containers"][0]
        assert container["envFrom"] == [{"secretRef": {"name": "lease-dashboard"}}], name
        env = {item["name"]: item.get("value") for item in container["env"]}
        # A worker's own name and liveness file aside, the settings are the same everywhere.
        environments.append(
            {k: v for k, v in env.items() if k not in ("POD_NAME", "CELERY_LIVENESS_FILE")}
        )
        assert env["DJANGO_ENV"] == "production", name
        # Behind the ingress every request comes from a private pod address: no range opens
        # /metrics, and X-Forwarded-For is believed from configured peers only.
        assert "METRICS_ALLOWED_IPS" not in env, name
    assert all(environment == environments[0] for environment in environments)


def test_defaults_believe_no_forwarded_for_and_the_example_names_its_proxies() -> None:
    web = deployment(render(), "web")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "TRUSTED_PROXY_CIDRS", "value": ""} in web["env"]
    example = deployment(render(production_values()), "web")
    env = {
        e["name"]: e["value"] for e in example["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert ipaddress.ip_network(env["TRUSTED_PROXY_CIDRS"]).is_private


@pytest.mark.parametrize(
    "name",
    [
        "SECRET_KEY",
        "DATABASE_URL",
        "METRICS_TOKEN",
        "OIDC_CLIENT_SECRET",
        "SECRETS_ENCRYPTION_KEYS_FILE",
    ],
)
def test_a_secret_in_the_values_is_refused_by_name(name: str) -> None:
    with pytest.raises(helm_python.HelmError, match=f"config.{name} is a secret"):
        render({"config": {name: "not-here"}})


def test_the_image_is_named_in_one_place_by_tag_or_digest() -> None:
    def images(values: dict[str, Any]) -> set[str]:
        manifests = render(values)
        return {c["image"] for _, spec in pod_specs(manifests) for c in spec["containers"]}

    # A placeholder registry: the repository names no real host.
    assert images({}) == {"registry.example.internal/lease-dashboard:0.1.0"}
    digest = "sha256:" + "ab" * 32
    image = {"repository": "registry.example.internal/x/lease-dashboard", "digest": digest}
    assert images({"image": image}) == {f"registry.example.internal/x/lease-dashboard@{digest}"}
    # `--set image.tag=2` hands the chart a number.
    assert images({"image": {"tag": 2}}) == {"registry.example.internal/lease-dashboard:2"}
    with pytest.raises(helm_python.HelmError, match=r"/image/digest.*does not match"):
        render({"image": {"digest": "ab" * 32}})


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"web": {"replica": 3}}, "/web"),
        ({"workerWatch": {"concurency": 80}}, "/workerWatch"),
        ({"networkPolicy": {"egress": {"postgress": {"to": []}}}}, "/networkPolicy/egress"),
        ({"config": {"allowed_hosts": "x"}}, "allowed_hosts"),
    ],
)
def test_a_misspelt_value_is_refused_rather_than_ignored(
    values: dict[str, Any], where: str
) -> None:
    """values.schema.json: Helm checks it at install, upgrade, template and lint."""
    with pytest.raises(helm_python.HelmError, match=where):
        render(values)


def test_web_serves_two_replicas_with_probes_and_a_graceful_stop() -> None:
    manifests = render()
    web = deployment(manifests, "web")
    assert web["spec"]["replicas"] == 2
    spec = web["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    command = container["command"]
    # gunicorn's control socket would be made under a $HOME that does not exist.
    assert "--no-control-socket" in command
    graceful = int(command[command.index("--graceful-timeout") + 1])
    assert graceful + 5 < spec["terminationGracePeriodSeconds"]
    (service,) = of_kind(manifests, "Service")
    assert service["spec"]["selector"] == web["spec"]["selector"]["matchLabels"]
    assert not of_kind(manifests, "HorizontalPodAutoscaler")


def test_the_example_scales_web_with_an_hpa_instead_of_a_fixed_count() -> None:
    manifests = render(production_values())
    web = deployment(manifests, "web")
    (hpa,) = of_kind(manifests, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": web["metadata"]["name"],
    }
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    # The HPA owns the count: a replicas field would reset it at every upgrade.
    assert "replicas" not in web["spec"]


def test_every_worker_and_web_has_a_disruption_budget_that_allows_a_drain(
    manifests: list[Manifest],
) -> None:
    budgets = {component(m): m["spec"] for m in of_kind(manifests, "PodDisruptionBudget")}
    assert set(budgets) == {"web", *WORKERS}
    assert budgets["web"]["minAvailable"] == 1
    for worker in WORKERS:
        # minAvailable 1 on a one-replica worker would block every node drain.
        assert budgets[worker]["maxUnavailable"] == 1, worker
        selector = deployment(manifests, worker)["spec"]["selector"]["matchLabels"]
        assert budgets[worker]["selector"]["matchLabels"] == selector


def test_beat_runs_exactly_once() -> None:
    beat = deployment(render(), "beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"]["type"] == "Recreate"


def test_workers_consume_their_own_queues_and_only_alerts_needs_prefork() -> None:
    from dashboard.celery import QUEUES

    manifests = render()
    commands = {
        w: deployment(manifests, w)["spec"]["template"]["spec"]["containers"][0] for w in WORKERS
    }
    queues = {w: c["command"][c["command"].index("--queues") + 1] for w, c in commands.items()}
    assert sorted(queues.values()) == sorted(QUEUES)
    watch = commands["worker-watch"]["command"]
    assert watch[watch.index("--pool") + 1] == "threads"
    # Celery enforces time limits in prefork workers only: the alerts tasks rely on them.
    assert "--pool" not in commands["worker-alerts"]["command"]


def test_workers_and_beat_are_alive_while_their_own_file_is_fresh(
    manifests: list[Manifest],
) -> None:
    """The old probe (`celery inspect ping`) took up to 10 s and ~66 MiB against a 10 s
    timeout; a stat of the file the process's own timer touches costs nothing."""
    assert "inspect ping" not in json.dumps(manifests)
    for name, alive_file in ALIVE_FILES.items():
        spec = deployment(manifests, name)["spec"]["template"]["spec"]
        container = spec["containers"][0]
        command = ["sh", "-c", f"test $(( $(date +%s) - $(stat -c %Y {alive_file}) )) -lt 60"]
        assert container["livenessProbe"]["exec"]["command"] == command, name
        assert container["startupProbe"]["exec"]["command"] == command, name
        # The file lives on the writable /tmp (the root is read-only).
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"], name
        env = {item["name"]: item.get("value") for item in container["env"]}
        if name != "beat":
            assert env["CELERY_LIVENESS_FILE"] == alive_file, name


@pytest.mark.parametrize(
    ("mtime_age", "alive"), [(0, True), (45, True), (75, False), (None, False)]
)
def test_the_liveness_command_judges_the_files_age(
    tmp_path: Any, mtime_age: int | None, alive: bool
) -> None:
    """The probe's own shell command, run here with sh, date and stat as in the image."""
    alive_file = tmp_path / "celery-worker-alive"
    if mtime_age is not None:
        alive_file.touch()
        now = alive_file.stat().st_mtime
        os.utime(alive_file, (now - mtime_age, now - mtime_age))
    container = deployment(render(), "worker")["spec"]["template"]["spec"]["containers"][0]
    command = container["livenessProbe"]["exec"]["command"]
    command = [part.replace("/tmp/celery-worker-alive", str(alive_file)) for part in command]
    result = subprocess.run(command, capture_output=True, check=False, timeout=10)
    assert (result.returncode == 0) is alive, result.stderr


def test_by_default_only_the_web_port_accepts_connections() -> None:
    manifests = render()
    policies = {p["metadata"]["name"]: p["spec"] for p in of_kind(manifests, "NetworkPolicy")}
    deny = policies["lease-dashboard-deny-ingress"]
    # Every pod of the release, no rule: nothing may connect to a worker, beat or the Job.
    assert deny["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "lease-dashboard",
        "app.kubernetes.io/instance": "lease-dashboard",
    }
    assert deny["policyTypes"] == ["Ingress"] and "ingress" not in deny
    web = policies["lease-dashboard-web-ingress"]
    assert web["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "web"
    (rule,) = web["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": "http"}]
    # Egress needs the operator's addresses: off until they are given.
    assert "lease-dashboard-egress" not in policies


def _egress(manifests: list[Manifest]) -> dict[str, Any]:
    (policy,) = [
        p["spec"]
        for p in of_kind(manifests, "NetworkPolicy")
        if "Egress" in p["spec"]["policyTypes"]
    ]
    return policy


def test_the_example_egress_reaches_the_named_destinations_only() -> None:
    manifests = render(production_values())
    policy = _egress(manifests)
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "lease-dashboard"
    ports = set()
    for rule in policy["egress"]:
        # A rule without `to` or `ports` allows every destination or every port.
        assert rule.get("to") and rule.get("ports"), rule
        ports |= {port["port"] for port in rule["ports"]}
    # DNS, PostgreSQL, Redis, SMTP, the web pods (helm test), NKS and API servers.
    assert {53, 5432, 6379, 587, 465, 8000, 443, 6443} <= ports
    blocks = [
        peer["ipBlock"] for rule in policy["egress"] for peer in rule["to"] if "ipBlock" in peer
    ]
    assert blocks
    for block in blocks:
        # IPv4 only in the example: an IPv6 block would fail here, visibly.
        network = ipaddress.IPv4Network(block["cidr"])
        excepted = [ipaddress.IPv4Network(cidr) for cidr in block.get("except", [])]
        # The API server refuses an `except` outside its cidr; the metadata service is never
        # let in by a broad range.
        assert all(e.subnet_of(network) and e != network for e in excepted), block
        if METADATA_SERVICE in network:
            assert any(METADATA_SERVICE in e for e in excepted), block
    # The example's peers reach the web pods from the ingress controller and Prometheus,
    # and the `helm test` pod is let in next to them.
    (web_rule,) = [
        p["spec"]["ingress"][0]
        for p in of_kind(manifests, "NetworkPolicy")
        if p["metadata"]["name"].endswith("web-ingress")
    ]
    assert len(web_rule["from"]) == 3
    assert web_rule["from"][-1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "test"
    )


def test_egress_without_the_database_address_is_refused() -> None:
    values = production_values()
    values["networkPolicy"]["egress"]["postgres"]["to"] = []
    with pytest.raises(helm_python.HelmError, match=r"networkPolicy.egress.postgres.to"):
        render(values)


def test_the_example_ingress_and_service_monitor_reach_the_web_service() -> None:
    manifests = render(production_values())
    (service,) = of_kind(manifests, "Service")
    port_names = {port["name"] for port in service["spec"]["ports"]}
    (ingress,) = of_kind(manifests, "Ingress")
    (rule,) = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in port_names
    assert ingress["spec"]["tls"][0]["hosts"] == [rule["host"]]
    (monitor,) = of_kind(manifests, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["port"] in port_names
    # In production /metrics answers only the bearer of the Secret's METRICS_TOKEN.
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "lease-dashboard", "key": "METRICS_TOKEN"},
    }
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()


class _Web(BaseHTTPRequestHandler):
    """The web Service as the test pod sees it, reached as an HTTP proxy: it answers what
    /readyz answers (dashboard.health.readiness_report's body)."""

    ready = True
    requested: list[str] = []

    def do_GET(self) -> None:
        type(self).requested.append(self.path)
        body: dict[str, Any] = {"status": "ok" if self.ready else "unavailable"}
        if not self.ready:
            body["reason"] = "database"
        payload = json.dumps(body).encode()
        self.send_response(200 if self.ready else 503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def web_proxy() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Web)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Web.requested = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        _Web.ready = True


@pytest.mark.parametrize("ready", [True, False])
def test_the_helm_test_pod_passes_only_when_readyz_says_ok(web_proxy: str, ready: bool) -> None:
    """The test pod's own command, unchanged, run with Python: its request for the Service's
    address goes through a proxy to a server that answers as /readyz does."""
    (pod,) = of_kind(render(), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    command = pod["spec"]["containers"][0]["command"]
    assert command[:2] == ["python", "-c"]
    _Web.ready = ready
    env = {"PATH": os.environ["PATH"], "http_proxy": web_proxy, "no_proxy": ""}
    result = subprocess.run(
        [sys.executable, "-c", command[2]], capture_output=True, text=True, env=env, timeout=30
    )
    assert (result.returncode == 0) is ready, result.stderr
    assert _Web.requested == ["http://lease-dashboard-web.lease-dashboard.svc:80/readyz"]


def test_the_readme_grants_what_the_chart_grants() -> None:
    """The README's ClusterRole for an account used from outside the cluster is the chart's."""
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, flags=re.DOTALL)
    roles = [
        document
        for block in blocks
        for document in yaml.safe_load_all(block)
        if isinstance(document, dict) and document.get("kind") == "ClusterRole"
    ]
    assert [role["rules"] for role in roles] == [READ_ONLY_RULES]
