"""NKS rows and incidents for alert tests, written straight with the ORM at the frozen clock."""

from __future__ import annotations

from itertools import count
from typing import Any

from django.utils import timezone

from alerts.models import Incident, IncidentState, Notice, Rule, Severity
from nks.models import (
    Freshness,
    Health,
    NksAccount,
    NksCluster,
    NksNodegroup,
    ResizeRequest,
    ResizeState,
)

_uuids = count(1)


def make_account(name: str = "kr1", **fields: Any) -> NksAccount:
    values: dict[str, Any] = {
        "api_url": "https://kr1-api-kubernetes.example.com",
        "token": "secret-token",
        "last_success_at": timezone.now(),
        "last_poll_at": timezone.now(),
    }
    values.update(fields)
    return NksAccount.objects.create(name=name, **values)


def make_nks_cluster(account: NksAccount, name: str = "prod", **fields: Any) -> NksCluster:
    """A healthy cluster polled just now."""
    now = timezone.now()
    values: dict[str, Any] = {
        "uuid": f"cluster-uuid-{next(_uuids)}",
        "status": "CREATE_COMPLETE",
        "health_status": "FRESH",
        "freshness": Freshness.FRESH,
        "health": Health.HEALTHY,
        "health_timestamp": now,
        "api": "OK",
        "api_status": "NORMAL",
        "api_ok": True,
        "node_status": "NORMAL",
        "node_count": 3,
        "nodes_ready": 3,
        "nodes_not_ready": 0,
        "polled_at": now,
        "refreshed_at": now,
    }
    values.update(fields)
    return NksCluster.objects.create(account=account, name=name, **values)


def make_nodegroup(
    cluster: NksCluster, name: str = "default-worker", **fields: Any
) -> NksNodegroup:
    values: dict[str, Any] = {
        "uuid": f"nodegroup-uuid-{next(_uuids)}",
        "role": "worker",
        "status": "CREATE_COMPLETE",
        "node_count": 3,
        "ready": 3,
        "not_ready": 0,
        "node_status": "NORMAL",
        "polled_at": timezone.now(),
    }
    values.update(fields)
    return NksNodegroup.objects.create(cluster=cluster, name=name, **values)


def make_resize(
    nodegroup: NksNodegroup, state: str = ResizeState.FAILED, **fields: Any
) -> ResizeRequest:
    now = timezone.now()
    values: dict[str, Any] = {
        "username": "olivia",
        "from_count": 3,
        "to_count": 5,
        "reason": "more capacity for the sale",
        "state": state,
        "created_at": now,
        "finished_at": now if state in (ResizeState.FAILED, ResizeState.SUCCEEDED) else None,
    }
    values.update(fields)
    return ResizeRequest.objects.create(
        cluster=nodegroup.cluster, nodegroup=nodegroup, nodegroup_name=nodegroup.name, **values
    )


def make_incident(
    key: str = "lease_expired:prod/kube-system/kube-scheduler",
    *,
    title: str = "kube-system/kube-scheduler lease expired",
    cluster: str = "prod",
    rule: str = Rule.LEASE_EXPIRED,
    severity: str = Severity.CRITICAL,
    **fields: Any,
) -> Incident:
    """An open incident as evaluation would have left it (its opened mail not yet planned)."""
    now = timezone.now()
    values: dict[str, Any] = {
        "state": IncidentState.FIRING,
        "since": now,
        "opened_at": now,
        "last_seen_at": now,
        "open_notice": Notice.WAITING,
        "details": {"facts": [{"label": "Holder", "text": "master-0"}]},
    }
    values.update(fields)
    return Incident.objects.create(
        key=key, title=title, cluster=cluster, rule=rule, severity=severity, **values
    )


API_DOWN = {"api": "NOT_OK", "api_status": "K8S_API_NOT_WORKING", "api_ok": False}
HEALTHY = {"api": "OK", "api_status": "NORMAL", "api_ok": True, "node_status": "NORMAL"}


def poll(cluster: NksCluster, **fields: Any) -> None:
    """A successful poll just now that saw these values."""
    now = timezone.now()
    NksCluster.objects.filter(pk=cluster.pk).update(polled_at=now, refreshed_at=now, **fields)
    NksAccount.objects.filter(pk=cluster.account_id).update(last_success_at=now, last_poll_at=now)
