"""Fencing token reuse: a leader-k8s token that comes back after another holder.

leader-k8s writes a fresh random token into holderIdentity at every acquisition, so a token
that held a lease, lost it to a different holder, and is then seen holding it again means a
stale holder wrote with an old view: fencing is broken. A release in between ("" holder)
is no other holder, and a token that comes back only through a leaseTransitions jump
(A -> A, the changes unseen) is not marked: who held the lease meanwhile is unknown.

Only the API server's own order shows a token back, within one life of the lease: the
ingestor asks here only for a change whose object has the same uid as, and a larger integer
resourceVersion than, the state it changes, and drops objects older than that state, so the
stored transitions of a life follow that order. Replays, relists of the same state and old
events delivered late after an API server stall never reach this check. The history read
is the lease's current life: transitions seen since its creationTimestamp.

Transitions are rare, so the check reads the lease's history with a query or two per
transition, at flush time; transitions of the same flush not yet committed are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import Q

from leases.models import LeaseTransition

# (from_holder, to_holder) of one transition.
Change = tuple[str, str]


def token_came_back(
    lease_id: int,
    current: Change,
    earlier: Sequence[Change],
    life_started: datetime | None = None,
) -> bool:
    """Whether `current` hands the lease to a token that held it before a different holder
    did. `earlier`: this lease's transitions of the same life written in the same flush,
    oldest first (not committed yet, so the database does not show them). `life_started`:
    the lease's creationTimestamp; stored transitions seen before it were another life's."""
    from_holder, token = current
    if not token or from_holder == token:
        return False
    others = ("", token)

    def someone_else(changes: Sequence[Change]) -> bool:
        return from_holder not in others or any(to not in others for _, to in changes)

    # The token's last tenure: in this flush's transitions first, then in the stored ones.
    for index in range(len(earlier) - 1, -1, -1):
        if token in earlier[index]:
            return someone_else(earlier[index:])
    history = LeaseTransition.objects.filter(lease_id=lease_id)
    if life_started is not None:
        history = history.filter(observed_at__gte=life_started)
    last = (
        history.filter(Q(from_holder=token) | Q(to_holder=token))
        .order_by("-observed_at", "-id")
        .values_list("id", "observed_at", "to_holder")
        .first()
    )
    if last is None:
        return False
    last_id, observed_at, to_holder = last
    if to_holder not in others or someone_else(earlier):
        return True
    since = Q(observed_at__gt=observed_at) | Q(observed_at=observed_at, id__gt=last_id)
    return history.filter(since).exclude(to_holder__in=others).exists()
