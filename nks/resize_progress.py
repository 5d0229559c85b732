"""Resizes in flight: progress read back from NKS until each ends.

``follow_resize`` every few seconds while a request is in flight, and every regular poll
through ``advance_resizes_from_poll``; ``sweep_resizes`` finds requests whose task was lost.
The request and the one call to NKS are ``nks.resizes``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext

from nks import client as nks
from nks.accounts import client_for
from nks.enums import OperationPhase
from nks.models import (
    IN_FLIGHT_STATES,
    EventState,
    NksEvent,
    ResizeRequest,
    ResizeState,
)
from nks.resizes import (
    CLOCK_SKEW,
    PENDING_RESEND_AFTER,
    RESIZE_EVENT_TYPES,
    SUBMITTING_TIMEOUT,
    UNCERTAIN_GIVE_UP,
    fail_request,
)
from nks.snapshot_store import upsert_events, upsert_nodegroups

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
                fail_request(
                    request.pk,
                    (ResizeState.SUBMITTING,),
                    gettext(
                        "The worker stopped before sending the resize; nothing was sent to NKS."
                    ),
                )
                return ResizeState.FAILED
            return state
        if now - request.nks_called_at <= SUBMITTING_TIMEOUT:
            return state
        # The worker died during or right after the call: the outcome is unknown.
        _transition(
            request, ResizeState.UNCERTAIN, error=gettext("The worker stopped during the call.")
        )
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
            event.contents or nodegroup.status_reason or gettext("NKS reports the resize failed.")
        )
        fields["finished_at"] = event.nks_updated_at or now
    elif nks_done_after_give_up(request, changed):
        # NKS's own answer on the nodegroup ends a request an admin gave up on, even when
        # its event never settles (the reason to give up on a request).
        verdict = _given_up_verdict(request, fields, now)
    elif (event is not None and event.state == EventState.IN_PROGRESS) or (
        changed and phase is OperationPhase.IN_PROGRESS
    ):
        verdict = ResizeState.IN_PROGRESS
    elif changed and phase is OperationPhase.FAILED:
        verdict = ResizeState.FAILED
        fields["error"] = nodegroup.status_reason or gettext("The nodegroup went %(status)s.") % {
            "status": nodegroup.status
        }
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
        fields["error"] = gettext(
            "NKS accepted the resize but showed no sign of starting it within %(minutes)s "
            "minutes (no event, no status change)."
        ) % {"minutes": settings.NKS_RESIZE_FOLLOW_MINUTES}
        fields["finished_at"] = now
    elif (
        request.state == ResizeState.UNCERTAIN
        and request.nks_called_at is not None
        and now - request.nks_called_at > UNCERTAIN_GIVE_UP
    ):
        verdict = ResizeState.FAILED
        fields["error"] = gettext(
            "%(error)s NKS showed no resize event or status change in the %(minutes)s minutes "
            "after that answer, so the resize was most likely not applied."
        ) % {"error": request.error, "minutes": int(UNCERTAIN_GIVE_UP.total_seconds() // 60)}
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
    """One progress check at a time, at most every half interval, however many tasks run.

    Never for a request an admin gave up on: only the regular poll reads it back then.
    """
    spacing = timedelta(seconds=settings.NKS_RESIZE_FOLLOW_SECONDS / 2)
    return (
        ResizeRequest.objects.filter(
            pk=request_id, state__in=IN_FLIGHT_STATES, given_up_at__isnull=True
        )
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


class GiveUp(enum.Enum):
    """What giving up on a request did."""

    ENDED = "ended"  # nothing had been sent to NKS: failed at once, the guard released
    UNFOLLOWED = "unfollowed"  # NKS may be acting: no longer followed, still guarded
    NOTHING = "nothing"  # already ended, or already given up


def give_up_resize(request_id: int, who: str) -> GiveUp:
    """Stop following a request (admin), never releasing the one-resize guard early.

    A request nothing was sent for (queued, or claimed before its one call) fails at once:
    the conditional updates of ``submit_resize`` then refuse to send it. Once the call may
    have reached NKS, NKS may be resizing: the dashboard stops following it fast, and the
    request stays in flight, and so blocks another resize of the nodegroup, until a reading
    taken after the give-up shows NKS finished (``advance_resize``), or NKS's own evidence
    ends it as before.
    """
    now = timezone.now()
    ended = ResizeRequest.objects.filter(
        pk=request_id,
        state__in=(ResizeState.PENDING, ResizeState.SUBMITTING),
        nks_called_at__isnull=True,
    ).update(
        state=ResizeState.FAILED,
        error=gettext("Given up by %(who)s before anything was sent to NKS.") % {"who": who},
        finished_at=now,
        given_up_by=who,
        given_up_at=now,
    )
    if ended:
        return GiveUp.ENDED
    unfollowed = ResizeRequest.objects.filter(
        pk=request_id, state__in=IN_FLIGHT_STATES, given_up_at__isnull=True
    ).update(given_up_by=who, given_up_at=now, follow_until=now)
    return GiveUp.UNFOLLOWED if unfollowed else GiveUp.NOTHING


def nks_done_after_give_up(request: ResizeRequest, changed: bool) -> bool:
    """Whether a given-up request may end: NKS acted on it and its nodegroup is no longer
    updating.

    Only a reading of the nodegroup taken after the give-up counts (an older one may predate
    NKS starting), and NKS must have shown a sign of this resize (started, or the nodegroup
    changed since the call). Without any sign, the usual windows end it ("no sign of
    starting"), as for a request nobody gave up on.
    """
    nodegroup = request.nodegroup
    if request.given_up_at is None or nodegroup.polled_at is None:
        return False
    if nodegroup.polled_at < request.given_up_at or nodegroup.phase is OperationPhase.IN_PROGRESS:
        return False
    return request.state == ResizeState.IN_PROGRESS or changed


def _given_up_verdict(request: ResizeRequest, fields: dict[str, Any], now: datetime) -> ResizeState:
    nodegroup = request.nodegroup
    fields["finished_at"] = now
    if nodegroup.node_count == request.to_count and nodegroup.phase is OperationPhase.COMPLETE:
        return ResizeState.SUCCEEDED
    fields["error"] = gettext(
        "Given up by %(who)s; NKS then showed nodegroup %(nodegroup)s %(status)s (no longer "
        "updating) with %(count)s nodes."
    ) % {
        "who": request.given_up_by,
        "nodegroup": nodegroup.name,
        "status": nodegroup.status or "-",
        "count": "-" if nodegroup.node_count is None else nodegroup.node_count,
    }
    return ResizeState.FAILED
