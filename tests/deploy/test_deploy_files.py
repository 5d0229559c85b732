"""The deployment files are checked offline: compose by docker-compose; the Helm chart in
test_helm_chart.py."""

from __future__ import annotations

import yaml

from tests.conftest import REPO_ROOT
from tests.deploy.helm import of_kind, render


def test_docker_compose_has_every_service_with_health_checks() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    names = ("postgres", "redis", "web", "worker-watch", "worker", "worker-alerts", "beat")
    names += ("mailpit",)
    assert set(names) <= set(services)
    for name in names:
        assert "healthcheck" in services[name], name
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]


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
        for document in of_kind(render(), "Deployment")
    ]
    ways = {
        "Procfile": [_queues_of(command) for command in procfile],
        "docker-compose.yml": [
            _queues_of(service["command"])
            for service in compose.values()
            if "worker" in service.get("command", [])
        ],
        "deploy/helm": [_queues_of(c) for c in deployments if "worker" in c],
    }
    for way, queues in ways.items():
        assert sorted(queues) == sorted(QUEUES), way
