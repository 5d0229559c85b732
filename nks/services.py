"""NKS domain functions: accounts, Lease sources from NKS clusters, pruning health history.

Resizes (request, submit once, follow) have their own module, ``nks.resizes``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify
from django.utils.translation import gettext

from leases.egress import check_nks_kubeconfig
from leases.kubeconfig import KubeconfigRefused, parse_kubeconfig
from leases.models import KubeCluster
from leases.services import ClusterConfigError, register_kube_cluster
from nks import client as nks
from nks.accounts import client_for
from nks.models import (
    NksAccount,
    NksCluster,
)

logger = logging.getLogger(__name__)

# --- Accounts ----------------------------------------------------------------------------------


class AccountConfigError(ValueError):
    """The account cannot be registered as given; the message never quotes a secret."""


def _check_url(label: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AccountConfigError(
            gettext("The %(field)s must be an http:// or https:// URL with a host.")
            % {"field": label}
        )
    return url.rstrip("/")


@transaction.atomic
def register_nks_account(
    name: str,
    *,
    api_url: str,
    identity_url: str = "",
    tenant_id: str = "",
    username: str = "",
    password: str = "",
    token: str = "",
    replace: bool = False,
) -> tuple[NksAccount, bool]:
    """Add (or with ``replace``, update) an NKS account polled by the dashboard."""
    identity = (identity_url, tenant_id, username, password)
    if token and any(identity):
        raise AccountConfigError(gettext("Give either a token or identity credentials, not both."))
    if not token and not all(identity):
        missing = [
            label
            for label, value in zip(
                ("identity URL", "tenant ID", "username", "password"), identity, strict=True
            )
            if not value
        ]
        # The missing names are option names (--identity-url, ...) in spirit: kept in English.
        raise AccountConfigError(
            gettext("Give a token, or identity credentials (missing: %(missing)s).")
            % {"missing": ", ".join(missing)}
        )
    existing = NksAccount.objects.select_for_update().filter(name=name).first()
    if existing is not None and not replace:
        raise AccountConfigError(
            gettext("An NKS account named %(name)s exists already (use --replace).")
            % {"name": repr(name)}
        )
    account = existing or NksAccount(name=name)
    account.api_url = _check_url("API URL", api_url)
    account.identity_url = _check_url("identity URL", identity_url) if identity_url else ""
    account.tenant_id = tenant_id
    account.username = username
    account.password = password
    account.token = token
    account.enabled = True
    account.next_poll_at = None  # poll it at beat's next tick
    try:
        account.full_clean(exclude=["password", "token"])
    except ValidationError as error:
        messages = "; ".join(
            f"{field}: {' '.join(texts)}" for field, texts in error.message_dict.items()
        )
        raise AccountConfigError(messages) from None
    account.save()
    return account, existing is None


# --- Lease source ----------------------------------------------------------------------------


class LeaseSourceError(Exception):
    """The cluster could not be registered as a Lease source; the message says why."""


@dataclass(frozen=True, slots=True)
class LeaseSource:
    kube_cluster: KubeCluster
    created: bool


def linked_kube_cluster(cluster: NksCluster) -> KubeCluster | None:
    """The Lease source watching this cluster: the linked one, or one with the same name."""
    if cluster.kube_cluster_id is not None:
        return cluster.kube_cluster
    return KubeCluster.objects.defer("kubeconfig").filter(name=kube_name(cluster.name)).first()


def kube_name(name: str) -> str:
    """The Lease source name an NKS cluster is registered (and matched) under."""
    return slugify(name)[:63] or "nks-cluster"


def watch_cluster_leases(cluster_id: int) -> LeaseSource:
    """Register the NKS cluster as a Lease source with the kubeconfig NKS hands out.

    The kubeconfig is stored as a secret by leases.services.register_kube_cluster; it never
    appears in a message. A Lease source of the same name is linked instead of replaced.
    """
    cluster = NksCluster.objects.select_related("account").get(pk=cluster_id)
    existing = linked_kube_cluster(cluster)
    if existing is not None:
        if cluster.kube_cluster_id != existing.pk:
            NksCluster.objects.filter(pk=cluster_id).update(kube_cluster=existing)
        return LeaseSource(existing, created=False)
    if cluster.gone_at is not None:
        raise LeaseSourceError(
            gettext("%(cluster)s is gone from NKS; there is nothing to watch.")
            % {"cluster": cluster.name}
        )
    try:
        kubeconfig = client_for(cluster.account).get_kubeconfig(cluster.uuid)
    except nks.NksError as error:
        raise LeaseSourceError(
            gettext("NKS did not hand out the kubeconfig: %(error)s") % {"error": error.message}
        ) from None
    try:
        # NKS's answer names the server the watchers will send NKS's credentials to: only the
        # cluster's own API address NKS reports, over https, at an allowed address.
        check_nks_kubeconfig(parse_kubeconfig(kubeconfig).data, cluster.api_address)
        with transaction.atomic():
            kube_cluster, created = register_kube_cluster(
                kube_name(cluster.name), kubeconfig=kubeconfig
            )
            # Marked as NKS's in the same transaction: no watcher ever reads it unrestricted.
            KubeCluster.objects.filter(pk=kube_cluster.pk).update(
                nks_api_address=cluster.api_address
            )
            NksCluster.objects.filter(pk=cluster_id).update(kube_cluster=kube_cluster)
    except (ClusterConfigError, KubeconfigRefused) as error:
        raise LeaseSourceError(
            gettext("The kubeconfig from NKS cannot be used: %(error)s") % {"error": error}
        ) from None
    logger.info("NKS cluster %s registered as Lease source %s", cluster.name, kube_cluster.name)
    return LeaseSource(kube_cluster, created=created)
