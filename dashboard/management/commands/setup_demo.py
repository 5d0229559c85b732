from __future__ import annotations

import os
from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import CommandError
from django.utils.translation import gettext

from alerts.models import AlertChannel, ChannelKind
from dashboard.commands import DatabaseCommand
from fakes.kube import kubeconfig_document
from fakes.kube.demo_nodes import DEMO_NKS_CLUSTER
from fakes.kube.leader_k8s_demo import LeaderK8sElections
from fakes.nks.routes import IDENTITY_PREFIX
from fakes.nks.scenarios import DEFAULT_PASSWORD, DEFAULT_TENANT_ID, DEFAULT_USERNAME
from leases.models import KubeCluster, LeaderGroup
from leases.services import register_kube_cluster
from nks.services import register_nks_account

# The fake kube-apiserver plays this fake NKS cluster (its Nodes are that cluster's nodes);
# a Lease source of the same name is the NKS cluster's, so its pages show the Nodes at once.
DEMO_CLUSTER = DEMO_NKS_CLUSTER
# What the demo cluster was called before it played an NKS cluster.
PREVIOUS_DEMO_CLUSTER = "demo"
DEMO_NKS_ACCOUNT = "demo"
# A Dooray!-format channel posting to the demo receiver (Procfile `chat`), in Korean: mail
# stays in ALERT_EMAIL_LANGUAGE, so the demo shows both languages side by side.
DEMO_CHANNEL = "demo-dooray"


class Command(DatabaseCommand):
    help = (
        "Register the demo sources that `make run` starts: the fake Kubernetes API server as "
        f"cluster {DEMO_CLUSTER!r} (the fake NKS cluster it plays) and the fake NKS as account "
        f"{DEMO_NKS_ACCOUNT!r}. Idempotent; refuses in production."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError(gettext("The demo sources are for development only."))
        # A database set up before keeps its demo history under the new name, instead of
        # two sources watching the same fake server.
        if not KubeCluster.objects.filter(name=DEMO_CLUSTER).exists():
            KubeCluster.objects.filter(name=PREVIOUS_DEMO_CLUSTER).update(name=DEMO_CLUSTER)
        port = int(os.environ.get("DEMO_APISERVER_PORT", "8001"))
        kubeconfig = yaml.safe_dump(
            kubeconfig_document(f"http://127.0.0.1:{port}", token=None, context_name=DEMO_CLUSTER),
            sort_keys=False,
        )
        cluster, created = register_kube_cluster(DEMO_CLUSTER, kubeconfig=kubeconfig, replace=True)
        # Whole sentences per outcome, so each language can order its words.
        message = (
            gettext("Demo Kubernetes cluster %(name)r registered (port %(port)d).")
            if created
            else gettext("Demo Kubernetes cluster %(name)r up to date (port %(port)d).")
        )
        self.stdout.write(message % {"name": DEMO_CLUSTER, "port": port})
        self._record_demo_group_sizes(cluster)
        self._register_demo_nks_account()
        self._register_demo_channel()

    def _record_demo_group_sizes(self, cluster: KubeCluster) -> None:
        # maxLeaders is written on no lease: an admin records it, as here for the demo's
        # groups, so that the group pages show held/expected and leader_group_degraded can open.
        for (namespace, name), size in (
            (LeaderK8sElections.GROUP, LeaderK8sElections.GROUP_SIZE),
            (LeaderK8sElections.DRAINED_GROUP, LeaderK8sElections.DRAINED_GROUP_SIZE),
        ):
            # An admin's later change of the size is kept.
            LeaderGroup.objects.get_or_create(
                cluster=cluster, namespace=namespace, name=name, defaults={"expected_size": size}
            )

    def _register_demo_nks_account(self) -> None:
        # The fake NKS (Procfile `nks`) with its published demo credentials.
        port = int(os.environ.get("DEMO_NKS_PORT", "8002"))
        url = f"http://127.0.0.1:{port}"
        _account, created = register_nks_account(
            DEMO_NKS_ACCOUNT,
            api_url=url,
            identity_url=f"{url}{IDENTITY_PREFIX}",
            tenant_id=DEFAULT_TENANT_ID,
            username=DEFAULT_USERNAME,
            password=DEFAULT_PASSWORD,
            replace=True,
        )
        message = (
            gettext("Demo NKS account %(name)r registered (port %(port)d).")
            if created
            else gettext("Demo NKS account %(name)r up to date (port %(port)d).")
        )
        self.stdout.write(message % {"name": DEMO_NKS_ACCOUNT, "port": port})

    def _register_demo_channel(self) -> None:
        port = int(os.environ.get("DEMO_CHAT_PORT", "8003"))
        channel, created = AlertChannel.objects.get_or_create(
            name=DEMO_CHANNEL,
            defaults={"kind": ChannelKind.DOORAY, "language": "ko", "time_zone": "Asia/Seoul"},
        )
        # The port may change between runs; the rest is the admin's to change.
        channel.url = f"http://127.0.0.1:{port}/dooray"
        channel.save(update_fields=["url", "updated_at"])
        message = (
            gettext("Demo Dooray! channel %(name)r registered (port %(port)d).")
            if created
            else gettext("Demo Dooray! channel %(name)r up to date (port %(port)d).")
        )
        self.stdout.write(message % {"name": DEMO_CHANNEL, "port": port})
