"""A refused resize, kept for the page it redirects to (post/redirect/get).

An invalid or conflicting resize POST redirects to the nodegroup page with a token in its
query (``?refused=<token>``); the page binds the form again from what was typed and shows
the errors, so the address bar holds the nodegroup page's own URL, a reload is a plain GET
that shows the same errors again (no "resend the form?" prompt) and every refresh of the page
asks that same URL. What was typed lives in the engineer's session, keyed by token so that
two tabs never eat each other's state, bounded in count, size and age.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.http import QueryDict
from django.utils.datastructures import MultiValueDict

from nks.forms import TYPED_NODES_SUFFIX, ResizeForm
from nks.models import IN_FLIGHT_STATES, NksNodegroup, ResizeRequest
from nks.node_picture import NodegroupNodes
from nks.resizes import ResizeConflict

SESSION_KEY = "refused_resizes"
# A few tabs' worth; the oldest goes first.
KEPT_AT_MOST = 5
KEPT_FOR_SECONDS = 3600
# Bounds on what a crafted POST can park in the session. The form's own limits are far
# below them (a reason of 1,000 characters, 10 nodes), so validating the kept copy gives
# the answer the POST had.
VALUE_CHARS_AT_MOST = 2000
VALUES_PER_FIELD_AT_MOST = 100
# The query parameter the redirect carries the token in.
QUERY_PARAMETER = "refused"


@dataclass(frozen=True, slots=True)
class RefusedResize:
    data: MultiValueDict[str, str]
    # The resize in flight that refused this one, if that was the reason.
    conflict_pk: int | None

    def conflict_still_in_flight(self, nodegroup: NksNodegroup) -> ResizeRequest | None:
        """The conflicting request, while it is still in flight (it may have finished since)."""
        if self.conflict_pk is None:
            return None
        return ResizeRequest.objects.filter(
            pk=self.conflict_pk, nodegroup=nodegroup, state__in=IN_FLIGHT_STATES
        ).first()


def _fresh(kept: Mapping[str, Any], now: float) -> dict[str, Any]:
    return {
        token: entry
        for token, entry in kept.items()
        if isinstance(entry, dict) and now - float(entry.get("at", 0)) < KEPT_FOR_SECONDS
    }


def keep_refused_resize(
    session: SessionBase,
    nodegroup: NksNodegroup,
    posted: QueryDict,
    *,
    conflict: ResizeRequest | None = None,
) -> str:
    """Keep what was typed in a refused resize; returns the token the redirect carries."""
    now = time.time()
    kept = _fresh(session.get(SESSION_KEY, {}), now)
    data = {
        name: [value[:VALUE_CHARS_AT_MOST] for value in posted.getlist(name)][
            :VALUES_PER_FIELD_AT_MOST
        ]
        # The nodes typed beside the checkboxes too (nks.forms.NodeChoices).
        for name in [*ResizeForm.base_fields, f"nodes_to_remove{TYPED_NODES_SUFFIX}"]
        if name in posted
    }
    token = secrets.token_urlsafe(9)
    kept[token] = {
        "nodegroup": nodegroup.pk,
        "data": data,
        "conflict": conflict.pk if conflict else None,
        "at": now,
    }
    newest = sorted(kept.items(), key=lambda item: item[1]["at"])[-KEPT_AT_MOST:]
    session[SESSION_KEY] = dict(newest)
    return token


def refused_resize(
    session: SessionBase, token: str | None, nodegroup: NksNodegroup
) -> RefusedResize | None:
    """The refused resize ``token`` names, if this session still has it for this nodegroup.

    It stays until it ages out, so a reload shows the same errors again.
    """
    if not token:
        return None
    entry = _fresh(session.get(SESSION_KEY, {}), time.time()).get(token)
    if entry is None or entry.get("nodegroup") != nodegroup.pk:
        return None
    data: MultiValueDict[str, str] = MultiValueDict(
        {str(name): [str(value) for value in values] for name, values in entry["data"].items()}
    )
    conflict = entry.get("conflict")
    return RefusedResize(data=data, conflict_pk=conflict if isinstance(conflict, int) else None)


def refused_resize_form(
    session: SessionBase, token: str | None, nodegroup: NksNodegroup, nodes: NodegroupNodes | None
) -> tuple[ResizeForm, ResizeRequest | None] | None:
    """The form of the refused resize ``token`` names, bound to what was typed and validated
    again against the nodegroup as it is now, with the conflicting request still in flight
    (if that was the refusal and it still is); None when the session has no such refusal."""
    refused = refused_resize(session, token, nodegroup)
    if refused is None:
        return None
    form = ResizeForm(refused.data, nodegroup=nodegroup, nodes=nodes)
    conflict = refused.conflict_still_in_flight(nodegroup)
    if form.is_valid() and conflict is not None:
        form.add_error(None, ResizeConflict(conflict).message)
    return form, conflict
