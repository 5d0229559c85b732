"""The JSON API's bodies: clusters with their nodegroups, and one resize request."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.urls import reverse

from dashboard.natural import natural_key
from dashboard.timefmt import api_time
from nks import queries
from nks.models import NksCluster, NksNodegroup, ResizeRequest


def _api_nodegroup(group: NksNodegroup) -> dict[str, Any]:
    return {
        "uuid": group.uuid,
        "name": group.name,
        "role": group.role or None,
        "status": group.status or None,
        "node_count": group.node_count,
        "min_node_count": group.min_node_count,
        "max_node_count": group.max_node_count,
        "ready": group.ready,
        "not_ready": group.not_ready,
        "node_status": group.node_status or None,
        "autoscaler_enabled": group.autoscaler_enabled,
        "gone": group.gone_at is not None,
    }


def _api_cluster(cluster: NksCluster, now: datetime) -> dict[str, Any]:
    return {
        "account": cluster.account.name,
        "uuid": cluster.uuid,
        "name": cluster.name,
        "status": cluster.status or None,
        "health": cluster.effective_health(now).value,
        "health_status": cluster.health_status or None,
        "api_status": cluster.api_status or None,
        "node_status": cluster.node_status or None,
        "health_timestamp": api_time(cluster.health_timestamp),
        "stale": cluster.is_stale(now),
        "gone": cluster.gone_at is not None,
        "polled_at": api_time(cluster.polled_at),
        "last_error": cluster.last_error or None,
        "nodegroups": [
            _api_nodegroup(group)
            for group in sorted(cluster.nodegroups.all(), key=lambda group: natural_key(group.name))
        ],
    }


def api_clusters(now: datetime) -> list[dict[str, Any]]:
    return [_api_cluster(cluster, now) for cluster in queries.api_clusters()]


def api_resize_request(request: ResizeRequest) -> dict[str, Any]:
    event = request.event if request.event_id else None
    return {
        "id": request.pk,
        "url": reverse("nks:resize_detail", args=[request.pk]),
        "api_url": reverse("api:nks_resize_request", args=[request.pk]),
        "state": request.state,
        "in_flight": request.is_in_flight,
        "cluster": {"uuid": request.cluster.uuid, "name": request.cluster.name},
        "nodegroup": request.nodegroup_name,
        "from_count": request.from_count,
        "to_count": request.to_count,
        "nodes_to_remove": list(request.nodes_to_remove or []),
        "reason": request.reason,
        "user": request.username,
        "source": request.source,
        "created_at": api_time(request.created_at),
        "nks_called_at": api_time(request.nks_called_at),
        "started_at": api_time(request.started_at),
        "finished_at": api_time(request.finished_at),
        # Given up: no longer followed fast, still in flight while NKS may act on it.
        "given_up_by": request.given_up_by or None,
        "given_up_at": api_time(request.given_up_at),
        "error": request.error or None,
        "event": (
            {
                "uuid": event.uuid,
                "type": event.type,
                "state": event.raw_state,
                "contents": event.contents or None,
            }
            if event is not None
            else None
        ),
    }
