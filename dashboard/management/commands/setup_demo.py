from __future__ import annotations

import os
from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from leases.fake_apiserver import kubeconfig_document
from leases.services import register_kube_cluster

DEMO_CLUSTER = "demo"


class Command(BaseCommand):
    help = (
        "Register the demo sources that `make run` starts: the fake Kubernetes API server as "
        "cluster 'demo'. Idempotent; refuses in production."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("The demo sources are for development only.")
        port = int(os.environ.get("DEMO_APISERVER_PORT", "8001"))
        kubeconfig = yaml.safe_dump(
            kubeconfig_document(f"http://127.0.0.1:{port}", token=None, context_name=DEMO_CLUSTER),
            sort_keys=False,
        )
        _cluster, created = register_kube_cluster(DEMO_CLUSTER, kubeconfig=kubeconfig, replace=True)
        state = "registered" if created else "up to date"
        self.stdout.write(f"Demo Kubernetes cluster {DEMO_CLUSTER!r} {state} (port {port}).")
