"""NKS rows written straight with the ORM, as a poll would leave them, for page tests that
need names or values the fake NKS would not serve (hostile names, odd uuids)."""

from __future__ import annotations

from itertools import count
from typing import Any

from django.utils import timezone

from nks.models import (
    Freshness,
    Health,
    NksAccount,
    NksCluster,
    NksNodegroup,
    ResizeRequest,
    ResizeState,
)

_numbers = count(1)


def make_account(name: str = "hostile", **fields: Any) -> NksAccount:
    values: dict[str, Any] = {"api_url": "https://nks.invalid", "token": "fixed-token"}
    values.update(fields)
    return NksAccount.objects.create(name=name, **values)


def make_nks_cluster(
    account: NksAccount, name: str = "prod-api", uuid: str | None = None, **fields: Any
) -> NksCluster:
    """A cluster polled just now, healthy and fresh."""
    now = timezone.now()
    values: dict[str, Any] = {
        "status": "CREATE_COMPLETE",
        "health_status": "FRESH",
        "freshness": Freshness.FRESH,
        "health": Health.HEALTHY,
        "node_count": 3,
        "nodes_ready": 3,
        "nodes_not_ready": 0,
        "polled_at": now,
        "refreshed_at": now,
    }
    values.update(fields)
    return NksCluster.objects.create(
        account=account, name=name, uuid=uuid or f"cluster-uuid-{next(_numbers)}", **values
    )


def make_nodegroup(
    cluster: NksCluster, name: str, node_count: int = 2, **fields: Any
) -> NksNodegroup:
    """A worker nodegroup of Ready nodes whose instance uuids are known."""
    number = next(_numbers)
    values: dict[str, Any] = {
        "uuid": f"nodegroup-uuid-{number}",
        "role": "worker",
        "status": "CREATE_COMPLETE",
        "node_count": node_count,
        "min_node_count": 1,
        "max_node_count": 10,
        "autoscaler_enabled": False,
        "ready": node_count,
        "not_ready": 0,
        "nodes": [
            {"uuid": f"node-{number}-{index}", "name": f"node-{number}-{index}", "ready": True}
            for index in range(node_count)
        ],
        "polled_at": timezone.now(),
    }
    values.update(fields)
    return NksNodegroup.objects.create(cluster=cluster, name=name, **values)


def make_resize_request(nodegroup: NksNodegroup, user: Any, **fields: Any) -> ResizeRequest:
    values: dict[str, Any] = {
        "username": user.get_username(),
        "from_count": nodegroup.node_count or 2,
        "to_count": (nodegroup.node_count or 2) + 1,
        "reason": "load test",
        "state": ResizeState.SUCCEEDED,
    }
    values.update(fields)
    return ResizeRequest.objects.create(
        user=user,
        cluster=nodegroup.cluster,
        nodegroup=nodegroup,
        nodegroup_name=nodegroup.name,
        **values,
    )
