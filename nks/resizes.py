"""Resizes: a recorded request and one call to NKS.

A resize is first a row (``request_resize``), then one task that calls NKS exactly once
(``submit_resize``), then progress read back from the nodegroup's status and NKS's events
(``nks.resize_progress``). See ``nks.models.ResizeRequest`` for the states.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext

from nks import client as nks
from nks.accounts import client_for
from nks.models import (
    IN_FLIGHT_STATES,
    NksNodegroup,
    ResizeRequest,
    ResizeState,
)
from nks.node_picture import nodegroup_nodes

if TYPE_CHECKING:
    from nks.forms import ResizeForm

logger = logging.getLogger(__name__)

RESIZE_EVENT_TYPES = ("NODEGROUP_SCALE_OUT", "NODEGROUP_SCALE_IN", "CLUSTER_RESIZE")
# NKS's clock and ours may differ a little: evidence this much "before" the call still counts.
# Kept small: an earlier operation's event or status must not be taken for this one's.
CLOCK_SKEW = timedelta(seconds=10)
# An uncertain call with no sign of it in NKS after this long was not applied.
UNCERTAIN_GIVE_UP = timedelta(minutes=5)
# A worker that claimed a request and then died leaves it "submitting" this long at most.
SUBMITTING_TIMEOUT = timedelta(minutes=2)
# A queued request whose task was lost is sent again after this long (the claim stops doubles).
PENDING_RESEND_AFTER = timedelta(seconds=30)


# --- Resize: request -----------------------------------------------------------------------


class ResizeConflict(Exception):
    """A resize of the nodegroup is already in flight; ``request`` is that one."""

    def __init__(self, request: ResizeRequest) -> None:
        self.request = request
        super().__init__(self.message)

    @property
    def message(self) -> str:
        request = self.request
        return gettext(
            "A resize of %(nodegroup)s is already in flight: request #%(id)s (%(from)s → %(to)s "
            "nodes, %(state)s) by %(username)s. Wait for it to finish."
        ) % {
            "nodegroup": request.nodegroup_name,
            "id": request.pk,
            "from": request.from_count,
            "to": request.to_count,
            "state": request.get_state_display(),
            "username": request.username or gettext("unknown"),
        }


def in_flight_resize(nodegroup: NksNodegroup) -> ResizeRequest | None:
    return ResizeRequest.objects.filter(nodegroup=nodegroup, state__in=IN_FLIGHT_STATES).first()


@transaction.atomic
def request_resize(
    *,
    user: AbstractBaseUser,
    nodegroup: NksNodegroup,
    node_count: int,
    nodes_to_remove: Sequence[str],
    reason: str,
    source: str = ResizeRequest.Source.FORM,
) -> ResizeRequest:
    """Record a validated resize and queue the one call to NKS (after commit).

    Raises ResizeConflict when a resize of the nodegroup is in flight. The check is backed by
    a partial unique index, so two engineers (or a double-click) at the same moment still
    create one request: the second insert fails and gets the first one's request.
    """
    existing = in_flight_resize(nodegroup)
    if existing is not None:
        raise ResizeConflict(existing)
    try:
        with transaction.atomic():
            request = ResizeRequest.objects.create(
                user=user,
                username=user.get_username(),
                source=source,
                cluster_id=nodegroup.cluster_id,
                nodegroup=nodegroup,
                nodegroup_name=nodegroup.name,
                from_count=nodegroup.node_count or 0,
                to_count=node_count,
                nodes_to_remove=list(nodes_to_remove),
                reason=reason,
                state=ResizeState.PENDING,
            )
    except IntegrityError:
        existing = in_flight_resize(nodegroup)
        if existing is None:
            raise
        raise ResizeConflict(existing) from None
    logger.info(
        "Resize #%s of %s requested by %s: %s -> %s nodes",
        request.pk,
        nodegroup.name,
        request.username,
        request.from_count,
        request.to_count,
    )
    from nks.tasks import submit_resize as submit_task

    transaction.on_commit(lambda: submit_task.delay(request.pk))
    return request


# --- Resize: the one call ------------------------------------------------------------------


def request_resize_from(
    form: ResizeForm, *, user: AbstractBaseUser, source: str = ResizeRequest.Source.FORM
) -> ResizeRequest:
    """`request_resize` with what a valid ResizeForm (the page's or the API's) cleaned."""
    data = form.cleaned_data
    return request_resize(
        user=user,
        nodegroup=form.nodegroup,
        node_count=data["node_count"],
        nodes_to_remove=data.get("nodes_to_remove") or [],
        reason=data["reason"],
        source=source,
    )


def may_have_been_applied(error: nks.NksError) -> bool:
    """Whether a failed write may still have reached NKS (and may be carried out).

    An HTTP 4xx answer is NKS refusing; a failure to connect never sent anything (the client
    marks those retryable). Timeouts after sending, 5xx, dropped connections and mangled
    answers leave the outcome unknown.
    """
    if error.retryable:
        return False
    if error.status is not None and 400 <= error.status < 500:
        return False
    return error.kind in (
        nks.ErrorKind.TIMEOUT,
        nks.ErrorKind.SERVER,
        nks.ErrorKind.CONNECTION,
        nks.ErrorKind.BAD_RESPONSE,
    )


def fail_request(request_id: int, from_states: Sequence[str], message: str, **fields: Any) -> bool:
    return (
        ResizeRequest.objects.filter(pk=request_id, state__in=from_states).update(
            state=ResizeState.FAILED, error=message, finished_at=timezone.now(), **fields
        )
        == 1
    )


def precheck_resize(
    request: ResizeRequest, group: nks.Nodegroup, now: datetime | None = None
) -> str | None:
    """Why the resize must not be sent, judged on a fresh read of the nodegroup, or None."""
    if group.in_progress:
        return gettext(
            "Nodegroup %(nodegroup)s is %(status)s in NKS: another operation is running."
        ) % {"nodegroup": group.name, "status": group.status}
    if group.autoscale.enabled:
        return gettext(
            "The cluster autoscaler is enabled on %(nodegroup)s: it owns the node count."
        ) % {"nodegroup": group.name}
    if group.node_count is not None and group.node_count != request.from_count:
        return gettext(
            "Nodegroup %(nodegroup)s has %(count)s nodes in NKS now, not the %(from)s the "
            "request was made for."
        ) % {"nodegroup": group.name, "count": group.node_count, "from": request.from_count}
    if request.nodes_to_remove:
        # NKS lists no node: the watched cluster's Nodes say who is (still) in the nodegroup.
        # Unwatched since the request was made: nothing to check against; NKS refuses UUIDs
        # that are not in the nodegroup itself.
        nodes = nodegroup_nodes(request.nodegroup, now or timezone.now())
        members = {node.instance.uuid for node in nodes.members} if nodes else None
        strangers = [uuid for uuid in request.nodes_to_remove if members and uuid not in members]
        if strangers:
            return gettext("Nodes %(nodes)s are no longer in nodegroup %(nodegroup)s.") % {
                "nodes": ", ".join(strangers),
                "nodegroup": group.name,
            }
    return None


def submit_resize(request_id: int) -> ResizeState | None:
    """Send the resize to NKS once. Safe to run twice: only the run that claims it sends.

    Returns the state it left the request in (the caller follows it up while it is in
    flight), or None when another run had it already.
    """
    claimed = (
        ResizeRequest.objects.filter(pk=request_id, state=ResizeState.PENDING).update(
            state=ResizeState.SUBMITTING
        )
        == 1
    )
    if not claimed:
        return None
    request = ResizeRequest.objects.select_related("cluster__account", "nodegroup").get(
        pk=request_id
    )
    cluster, nodegroup = request.cluster, request.nodegroup
    client = client_for(cluster.account)
    submitting = (ResizeState.SUBMITTING,)
    try:
        fresh = client.get_nodegroup(cluster.uuid, nodegroup.uuid)
    except nks.NksError as error:
        fail_request(
            request_id,
            submitting,
            gettext(
                "Could not read the nodegroup from NKS before resizing, so nothing was sent: "
                "%(error)s"
            )
            % {"error": error.message},
            error_kind=error.kind.value,
            error_status=error.status,
        )
        return ResizeState.FAILED
    problem = precheck_resize(request, fresh)
    if problem is not None:
        fail_request(
            request_id,
            submitting,
            gettext("%(problem)s Nothing was sent to NKS.") % {"problem": problem},
        )
        return ResizeState.FAILED

    # The last gate before the POST: a run that lost the request (given up as stuck while it
    # waited on the read above) must not send it.
    now = timezone.now()
    if (
        ResizeRequest.objects.filter(
            pk=request_id, state=ResizeState.SUBMITTING, nks_called_at__isnull=True
        ).update(
            nks_called_at=now,
            follow_until=now + timedelta(minutes=settings.NKS_RESIZE_FOLLOW_MINUTES),
        )
        != 1
    ):
        return None
    try:
        client.resize(
            cluster.uuid,
            nodegroup.uuid,
            request.to_count,
            nodes_to_remove=request.nodes_to_remove or None,
        )
    except nks.NksError as error:
        if may_have_been_applied(error):
            state = ResizeState.UNCERTAIN
            ResizeRequest.objects.filter(pk=request_id, state=ResizeState.SUBMITTING).update(
                state=state,
                error=error.message,
                error_kind=error.kind.value,
                error_status=error.status,
            )
            logger.warning("Resize #%s: outcome unknown: %s", request_id, error.message)
        else:
            state = ResizeState.FAILED
            fail_request(
                request_id,
                submitting,
                error.message,
                error_kind=error.kind.value,
                error_status=error.status,
            )
            logger.warning("Resize #%s refused by NKS: %s", request_id, error.message)
            return state
    else:
        state = ResizeState.SUBMITTED
        ResizeRequest.objects.filter(pk=request_id, state=ResizeState.SUBMITTING).update(
            state=state
        )
    return state
