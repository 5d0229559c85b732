"""One resize request's page: its steps from queued to done, and what NKS said."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dashboard.timefmt import When, iso_js, when
from nks.models import ResizeRequest, ResizeState
from nks.presenters.resizes import ResizeRow, resize_rows
from nks.presenters.rows import EventRow, NodegroupRow, event_rows, nodegroup_row

STATE_EXPLANATIONS = {
    ResizeState.PENDING: "Queued: a worker will send it to NKS in a moment.",
    ResizeState.SUBMITTING: "A worker is checking the nodegroup and sending the resize to NKS.",
    ResizeState.SUBMITTED: "NKS accepted the resize; waiting for it to start.",
    ResizeState.IN_PROGRESS: "NKS is resizing the nodegroup.",
    ResizeState.UNCERTAIN: "The call to NKS failed in a way that may still have reached it. "
    "The dashboard is watching the nodegroup and its events to find out; it will not send the "
    "resize again.",
    ResizeState.SUCCEEDED: "NKS resized the nodegroup.",
    ResizeState.FAILED: "The resize did not happen (or NKS reported it failed).",
}


@dataclass(frozen=True, slots=True)
class Step:
    label: str
    done: bool
    failed: bool
    current: bool
    at: When | None
    note: str


@dataclass(slots=True)
class ResizeDetail:
    request: ResizeRequest
    row: ResizeRow
    steps: list[Step]
    event: EventRow | None
    nodegroup: NodegroupRow
    removal_names: list[str]
    server_now: str
    explanation: str


def _steps(request: ResizeRequest, now: datetime) -> list[Step]:
    state = ResizeState(request.state)
    failed = state == ResizeState.FAILED
    sent = request.nks_called_at is not None
    started = request.started_at is not None
    finished = state in (ResizeState.SUCCEEDED, ResizeState.FAILED)
    accepted = state in (ResizeState.SUBMITTED, ResizeState.IN_PROGRESS, ResizeState.SUCCEEDED)
    accepted = accepted or started
    return [
        Step(
            "Queued", True, False, state == ResizeState.PENDING, when(request.created_at, now), ""
        ),
        Step(
            "Sent to NKS",
            sent,
            failed and not sent,
            state == ResizeState.SUBMITTING,
            when(request.nks_called_at, now),
            "once" if sent else ("nothing was sent" if failed else ""),
        ),
        Step(
            "Accepted by NKS",
            accepted,
            (failed and sent and not accepted) or state == ResizeState.UNCERTAIN,
            state in (ResizeState.SUBMITTED, ResizeState.UNCERTAIN),
            None,
            "answer unclear: following up" if state == ResizeState.UNCERTAIN else "",
        ),
        Step(
            "In progress",
            started,
            False,
            state == ResizeState.IN_PROGRESS,
            when(request.started_at, now),
            "nodegroup UPDATE_IN_PROGRESS or event IN_PROGRESS",
        ),
        Step(
            "Failed" if failed else "Succeeded",
            finished,
            failed,
            finished,
            when(request.finished_at, now),
            "",
        ),
    ]


def resize_detail(request: ResizeRequest, now: datetime) -> ResizeDetail:
    """`request` comes with its cluster, nodegroup and event."""
    (row,) = resize_rows([request], now)
    names = {node.get("uuid"): node.get("name") for node in request.nodegroup.nodes}
    return ResizeDetail(
        request=request,
        row=row,
        steps=_steps(request, now),
        event=event_rows([request.event], now)[0] if request.event_id else None,
        nodegroup=nodegroup_row(request.nodegroup, request.cluster, now),
        removal_names=[
            f"{names.get(uuid) or '?'} ({uuid})" for uuid in request.nodes_to_remove or []
        ],
        server_now=iso_js(now),
        explanation=STATE_EXPLANATIONS[ResizeState(request.state)],
    )
