"""Resizes: a recorded request, one call to NKS, and progress read back until it ends.

A resize is first a row (``request_resize``), then one task that calls NKS exactly once
(``submit_resize``), then progress read back from the nodegroup's status and NKS's events
(``follow_resize`` every few seconds while in flight, and every regular poll through
``advance_resizes_from_poll``). See ``nks.models.ResizeRequest`` for the states.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from nks import client as nks
from nks.accounts import client_for
from nks.enums import OperationPhase
from nks.models import (
    IN_FLIGHT_STATES,
    EventState,
    NksEvent,
    NksNodegroup,
    ResizeRequest,
    ResizeState,
)
from nks.snapshot_store import upsert_events, upsert_nodegroups

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
        return (
            f"A resize of {request.nodegroup_name} is already in flight: request "
            f"#{request.pk} ({request.from_count} → {request.to_count} nodes, "
            f"{request.get_state_display()}) by {request.username or 'unknown'}. "
            "Wait for it to finish."
        )


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


def _fail(request_id: int, from_states: Sequence[str], message: str, **fields: Any) -> bool:
    return (
        ResizeRequest.objects.filter(pk=request_id, state__in=from_states).update(
            state=ResizeState.FAILED, error=message, finished_at=timezone.now(), **fields
        )
        == 1
    )


def precheck_resize(request: ResizeRequest, group: nks.Nodegroup) -> str | None:
    """Why the resize must not be sent, judged on a fresh read of the nodegroup, or None."""
    if group.in_progress:
        return f"Nodegroup {group.name} is {group.status} in NKS: another operation is running."
    if group.autoscale.enabled:
        return f"The cluster autoscaler is enabled on {group.name}: it owns the node count."
    if group.node_count is not None and group.node_count != request.from_count:
        return (
            f"Nodegroup {group.name} has {group.node_count} nodes in NKS now, not the "
            f"{request.from_count} the request was made for."
        )
    if request.nodes_to_remove and group.nodes:
        members = {node.uuid for node in group.nodes}
        strangers = [uuid for uuid in request.nodes_to_remove if uuid not in members]
        if strangers:
            return f"Nodes {', '.join(strangers)} are no longer in nodegroup {group.name}."
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
        _fail(
            request_id,
            submitting,
            f"Could not read the nodegroup from NKS before resizing, so nothing was sent: "
            f"{error.message}",
            error_kind=error.kind.value,
            error_status=error.status,
        )
        return ResizeState.FAILED
    problem = precheck_resize(request, fresh)
    if problem is not None:
        _fail(request_id, submitting, f"{problem} Nothing was sent to NKS.")
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
            _fail(
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


# --- Resize: progress ----------------------------------------------------------------------


def matching_event(request: ResizeRequest) -> NksEvent | None:
    """The NKS event of this resize: the first resize-type event on the nodegroup since the call.

    NKS does not say which request an event belongs to; a resize started by someone else (in
    the console) in the same minutes could match too. Events already matched to another
    request are skipped.
    """
    if request.event_id is not None:
        return request.event
    if request.nks_called_at is None:
        return None
    nodegroup = request.nodegroup
    on_nodegroup = (
        Q(nodegroup_id=nodegroup.pk)
        | Q(resource_uuid=nodegroup.uuid)
        | Q(resource_type="nodegroup", resource_name=nodegroup.name)
        | Q(type="CLUSTER_RESIZE")
    )
    return (
        NksEvent.objects.filter(
            on_nodegroup,
            cluster_id=request.cluster_id,
            type__in=RESIZE_EVENT_TYPES,
            nks_created_at__gte=request.nks_called_at - CLOCK_SKEW,
        )
        .exclude(resizes__isnull=False)
        .order_by("nks_created_at", "pk")
        .first()
    )


def _transition(request: ResizeRequest, state: ResizeState, **fields: Any) -> bool:
    if request.state == state and not fields:
        return False
    return (
        ResizeRequest.objects.filter(pk=request.pk, state=request.state).update(
            state=state, **fields
        )
        == 1
    )


def advance_resize(request: ResizeRequest, now: datetime) -> ResizeState:
    """Move an in-flight request on from what the database knows of NKS now.

    Evidence, best first: the matching event's state; else the nodegroup's status and size
    (changed since the call). Returns the request's state afterwards.
    """
    state = ResizeState(request.state)
    if state == ResizeState.PENDING or state not in IN_FLIGHT_STATES:
        return state
    if state == ResizeState.SUBMITTING:
        if request.nks_called_at is None:
            if now - request.created_at > SUBMITTING_TIMEOUT:
                _fail(
                    request.pk,
                    (ResizeState.SUBMITTING,),
                    "The worker stopped before sending the resize; nothing was sent to NKS.",
                )
                return ResizeState.FAILED
            return state
        if now - request.nks_called_at <= SUBMITTING_TIMEOUT:
            return state
        # The worker died during or right after the call: the outcome is unknown.
        _transition(request, ResizeState.UNCERTAIN, error="The worker stopped during the call.")
        request.state = ResizeState.UNCERTAIN

    nodegroup = request.nodegroup
    event = matching_event(request)
    fields: dict[str, Any] = {}
    if event is not None and request.event_id is None:
        fields["event"] = event
    since = (request.nks_called_at or request.created_at) - CLOCK_SKEW
    changed = nodegroup.nks_updated_at is not None and nodegroup.nks_updated_at >= since
    phase = nodegroup.phase

    verdict: ResizeState | None = None
    if event is not None and event.state == EventState.SUCCESS:
        verdict = ResizeState.SUCCEEDED
        fields["finished_at"] = event.nks_updated_at or now
    elif event is not None and event.state == EventState.FAIL:
        verdict = ResizeState.FAILED
        fields["error"] = (
            event.contents or nodegroup.status_reason or "NKS reports the resize failed."
        )
        fields["finished_at"] = event.nks_updated_at or now
    elif (event is not None and event.state == EventState.IN_PROGRESS) or (
        changed and phase is OperationPhase.IN_PROGRESS
    ):
        verdict = ResizeState.IN_PROGRESS
    elif changed and phase is OperationPhase.FAILED:
        verdict = ResizeState.FAILED
        fields["error"] = nodegroup.status_reason or f"The nodegroup went {nodegroup.status}."
        fields["finished_at"] = now
    elif changed and phase is OperationPhase.COMPLETE and nodegroup.node_count == request.to_count:
        verdict = ResizeState.SUCCEEDED
        fields["finished_at"] = now
    elif (
        request.state == ResizeState.SUBMITTED
        and request.nks_called_at is not None
        and now - request.nks_called_at > timedelta(minutes=settings.NKS_RESIZE_FOLLOW_MINUTES)
    ):
        verdict = ResizeState.FAILED
        fields["error"] = (
            "NKS accepted the resize but showed no sign of starting it within "
            f"{settings.NKS_RESIZE_FOLLOW_MINUTES} minutes (no event, no status change)."
        )
        fields["finished_at"] = now
    elif (
        request.state == ResizeState.UNCERTAIN
        and request.nks_called_at is not None
        and now - request.nks_called_at > UNCERTAIN_GIVE_UP
    ):
        verdict = ResizeState.FAILED
        fields["error"] = (
            f"{request.error} NKS showed no resize event or status change in the "
            f"{int(UNCERTAIN_GIVE_UP.total_seconds() // 60)} minutes after that answer, so the "
            "resize was most likely not applied."
        )
        fields["finished_at"] = now

    if verdict is None:
        verdict = ResizeState(request.state)
    if verdict == ResizeState.SUCCEEDED:
        fields["error"] = ""
    if verdict in (ResizeState.IN_PROGRESS, ResizeState.SUCCEEDED) and not request.started_at:
        fields["started_at"] = (event.nks_created_at if event else None) or now
    if _transition(request, verdict, **fields):
        return verdict
    return ResizeState(
        ResizeRequest.objects.filter(pk=request.pk).values_list("state", flat=True).get()
    )


def _in_flight_requests() -> Any:
    return ResizeRequest.objects.filter(state__in=IN_FLIGHT_STATES).select_related(
        "nodegroup", "event", "cluster"
    )


def advance_resizes_from_poll(account_id: int) -> None:
    """After a poll, move the account's in-flight requests on from the data it stored."""
    now = timezone.now()
    for request in _in_flight_requests().filter(cluster__account_id=account_id):
        advance_resize(request, now)


def claim_follow_check(request_id: int, now: datetime) -> bool:
    """One progress check at a time, at most every half interval, however many tasks run."""
    spacing = timedelta(seconds=settings.NKS_RESIZE_FOLLOW_SECONDS / 2)
    return (
        ResizeRequest.objects.filter(pk=request_id, state__in=IN_FLIGHT_STATES)
        .filter(Q(last_checked_at__isnull=True) | Q(last_checked_at__lte=now - spacing))
        .update(last_checked_at=now)
        == 1
    )


def follow_resize(request_id: int) -> bool:
    """Read the nodegroup and the cluster's events back from NKS and advance the request.

    Returns True while the request is in flight and inside its follow window (the caller
    checks again a few seconds later); False when it is done or no longer followed fast
    (the regular poll still advances it).
    """
    now = timezone.now()
    if not claim_follow_check(request_id, now):
        # Done, or another follow-up checked it moments ago and keeps following it.
        return False
    request = ResizeRequest.objects.select_related("cluster__account", "nodegroup", "event").get(
        pk=request_id
    )
    if request.state in (ResizeState.SUBMITTED, ResizeState.IN_PROGRESS, ResizeState.UNCERTAIN):
        cluster = request.cluster
        client = client_for(cluster.account)
        try:
            group = client.get_nodegroup(cluster.uuid, request.nodegroup.uuid)
            events = client.list_events(cluster.uuid)
        except nks.NksError as error:
            ResizeRequest.objects.filter(pk=request_id).update(check_error=error.message)
        else:
            with transaction.atomic():
                ids = upsert_nodegroups([(cluster.pk, group, None)], now)
                upsert_events([(cluster.pk, event) for event in events], ids, now)
            ResizeRequest.objects.filter(pk=request_id).update(check_error="")
            request.refresh_from_db()
            request.nodegroup.refresh_from_db()
    state = advance_resize(request, now)
    return state in IN_FLIGHT_STATES and (
        request.follow_until is None or timezone.now() < request.follow_until
    )


@dataclass(slots=True)
class SweepResult:
    resent: list[int]
    followed: list[int]


def sweep_resizes(now: datetime) -> SweepResult:
    """Requests whose task was lost: queued ones to send again, followed ones gone quiet."""
    resend = list(
        ResizeRequest.objects.filter(
            state=ResizeState.PENDING, created_at__lte=now - PENDING_RESEND_AFTER
        ).values_list("pk", flat=True)
    )
    quiet = now - timedelta(seconds=4 * settings.NKS_RESIZE_FOLLOW_SECONDS + 10)
    follow = list(
        ResizeRequest.objects.filter(state__in=IN_FLIGHT_STATES)
        .exclude(state=ResizeState.PENDING)
        .filter(Q(follow_until__isnull=True) | Q(follow_until__gt=now))
        .filter(Q(last_checked_at__isnull=True) | Q(last_checked_at__lte=quiet))
        .values_list("pk", flat=True)
    )
    return SweepResult(resent=resend, followed=follow)


def give_up_resize(request_id: int, who: str) -> bool:
    """Stop following a stuck request (admin): failed, with who gave up in the audit."""
    return _fail(
        request_id,
        IN_FLIGHT_STATES,
        f"Given up by {who}: the dashboard stopped following it. Check NKS before resizing again.",
    )
