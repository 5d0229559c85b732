"""Resize requests as table rows: the audit, the cluster and nodegroup pages, the overview."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.urls import reverse

from dashboard.timefmt import When, when
from nks.models import IN_FLIGHT_STATES, ResizeRequest, ResizeState
from nks.presenters.rows import nodegroup_url


@dataclass(slots=True)
class ResizeRow:
    id: int
    url: str
    cluster: str
    cluster_url: str
    nodegroup: str
    nodegroup_url: str
    change: str
    nodes_to_remove: list[str]
    username: str
    source: str
    reason: str
    state: ResizeState
    in_flight: bool
    created: When
    finished: When | None
    error: str


def resize_rows(requests: Iterable[ResizeRequest], now: datetime) -> list[ResizeRow]:
    rows = []
    for request in requests:
        state = ResizeState(request.state)
        created = when(request.created_at, now)
        assert created is not None
        rows.append(
            ResizeRow(
                id=request.pk,
                url=reverse("nks:resize_detail", args=[request.pk]),
                cluster=request.cluster.name,
                cluster_url=reverse("nks:cluster", args=[request.cluster.uuid]),
                nodegroup=request.nodegroup_name,
                nodegroup_url=nodegroup_url(request.cluster.uuid, request.nodegroup_name),
                change=f"{request.from_count} → {request.to_count}",
                nodes_to_remove=list(request.nodes_to_remove or []),
                username=request.username,
                source=request.get_source_display(),
                reason=request.reason,
                state=state,
                in_flight=state in IN_FLIGHT_STATES,
                created=created,
                finished=when(request.finished_at, now),
                error=request.error,
            )
        )
    return rows
