"""One resize request's page: its steps from queued to done, and what NKS said."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.functional import Promise
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.timefmt import When, iso_js, iso_utc, local_moment_text, when
from nks.models import ResizeRequest, ResizeState
from nks.node_picture import RemovedNode, removed_nodes
from nks.presenters.resizes import ResizeRow, resize_rows
from nks.presenters.rows import EventRow, NodegroupRow, event_rows, nodegroup_row

STATE_EXPLANATIONS: dict[ResizeState, str | Promise] = {
    ResizeState.PENDING: _("Queued: a worker will send it to NKS in a moment."),
    ResizeState.SUBMITTING: _("A worker is checking the nodegroup and sending the resize to NKS."),
    ResizeState.SUBMITTED: _("NKS accepted the resize; waiting for it to start."),
    ResizeState.IN_PROGRESS: _("NKS is resizing the nodegroup."),
    ResizeState.UNCERTAIN: _(
        "The call to NKS failed in a way that may still have reached it. The dashboard is "
        "watching the nodegroup and its events to find out; it will not send the resize again."
    ),
    ResizeState.SUCCEEDED: _("NKS resized the nodegroup."),
    ResizeState.FAILED: _("The resize did not happen (or NKS reported it failed)."),
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
class Removal:
    """A node the request named for removal, and what the cluster says of it now."""

    uuid: str
    name: str
    url: str
    deleted: When | None
    lease_gone: bool
    text: str


@dataclass(slots=True)
class ResizeDetail:
    request: ResizeRequest
    row: ResizeRow
    steps: list[Step]
    event: EventRow | None
    nodegroup: NodegroupRow
    removals: list[Removal]
    # Why the removals cannot be confirmed from the cluster ("" when they can, or none).
    removals_note: str
    server_now: str
    # When it was asked for, to the second in the reader's zone (UTC in the tooltip).
    created_text: str

    @property
    def awaiting_removals(self) -> bool:
        """NKS is done but the cluster still has a removed node: the page keeps looking."""
        return self.request.state == ResizeState.SUCCEEDED and any(
            removal.name and removal.deleted is None for removal in self.removals
        )

    explanation: str | Promise

    @property
    def progress_said(self) -> str:
        """The request's progress in one sentence, for the page's polite live region.

        dashboard.js puts it there only when it differs from the last one said, so the
        2-second refresh announces each change once, and nothing while nothing changes.
        """
        said = gettext("Resize #%(id)s: %(state)s.") % {
            "id": self.row.id,
            "state": self.row.state.label,
        }
        parts = [said, str(self.explanation), self.row.error]
        return " ".join(part for part in parts if part)


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
            gettext("Queued"),
            True,
            False,
            state == ResizeState.PENDING,
            when(request.created_at, now),
            "",
        ),
        Step(
            gettext("Sent to NKS"),
            sent,
            failed and not sent,
            state == ResizeState.SUBMITTING,
            when(request.nks_called_at, now),
            gettext("once") if sent else (gettext("nothing was sent") if failed else ""),
        ),
        Step(
            gettext("Accepted by NKS"),
            accepted,
            (failed and sent and not accepted) or state == ResizeState.UNCERTAIN,
            state in (ResizeState.SUBMITTED, ResizeState.UNCERTAIN),
            None,
            gettext("answer unclear: following up") if state == ResizeState.UNCERTAIN else "",
        ),
        Step(
            gettext("In progress"),
            started,
            False,
            state == ResizeState.IN_PROGRESS,
            when(request.started_at, now),
            gettext("nodegroup UPDATE_IN_PROGRESS or event IN_PROGRESS"),
        ),
        Step(
            gettext("Failed") if failed else gettext("Succeeded"),
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
    removals, note = _removals(request, now)
    return ResizeDetail(
        request=request,
        row=row,
        steps=_steps(request, now),
        event=event_rows([request.event], now)[0] if request.event_id else None,
        nodegroup=nodegroup_row(request.nodegroup, request.cluster, now),
        removals=removals,
        removals_note=note,
        server_now=iso_js(now),
        created_text=local_moment_text(request.created_at),
        explanation=_explanation(request),
    )


def _explanation(request: ResizeRequest) -> str | Promise:
    state = ResizeState(request.state)
    if request.given_up_at is not None and request.is_in_flight:
        # Giving up stops the fast follow-up, not NKS: the guard on the nodegroup stays.
        return gettext(
            "%(who)s gave up following this resize at %(at)s. NKS may still be acting on it, so "
            "no other resize of this nodegroup can start until a poll shows the nodegroup no "
            "longer updating."
        ) % {"who": request.given_up_by, "at": local_moment_text(request.given_up_at)}
    return STATE_EXPLANATIONS[state]


def _removal_text(node: RemovedNode, state: ResizeState) -> str:
    if node.deleted_at is not None:
        values = {"node": node.name, "at": iso_utc(node.deleted_at)}
        if not node.name:
            return (
                gettext("a node never seen in the cluster deleted from the cluster at %(at)s")
                % values
            )
        if node.lease_gone:
            return gettext("node %(node)s deleted from the cluster at %(at)s") % values
        return (
            gettext(
                "node %(node)s deleted from the cluster at %(at)s; its heartbeat Lease is "
                "still there"
            )
            % values
        )
    if not node.name:
        return gettext("no Node object with this instance UUID was seen in the cluster")
    if state == ResizeState.SUCCEEDED:
        return gettext(
            "node %(node)s: NKS finished, waiting for the cluster to delete its Node object"
        ) % {"node": node.name}
    return gettext("node %(node)s: still in the cluster") % {"node": node.name}


def _removals(request: ResizeRequest, now: datetime) -> tuple[list[Removal], str]:
    uuids = list(request.nodes_to_remove or [])
    if not uuids:
        return [], ""
    request.nodegroup.cluster = request.cluster  # loaded already; spares a query
    found = removed_nodes(request.nodegroup, uuids)
    state = ResizeState(request.state)
    if found is None:
        rows = [Removal(uuid, "", "", None, False, "") for uuid in uuids]
        return rows, gettext(
            "The cluster is not watched, so whether these nodes left it cannot be confirmed."
        )
    return [
        Removal(
            uuid=node.uuid,
            name=node.name,
            url=node.url,
            deleted=when(node.deleted_at, now),
            lease_gone=node.lease_gone,
            text=_removal_text(node, state),
        )
        for node in found
    ], ""
