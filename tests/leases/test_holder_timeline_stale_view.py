"""The lease page's holder table when a stale holder writes back its old view."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leases.models import LeaseTransition
from leases.presenters.lease_detail import holder_timeline
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db


def test_a_change_whose_acquire_time_predates_the_previous_change_is_placed_when_seen() -> None:
    lease = make_lease(make_cluster(), "reconciler", namespace="operators", holder="b4k-a")
    make_transition(lease, "b4k-a", "b4k-b", seconds_ago=600)
    reused = make_transition(lease, "b4k-b", "b4k-a", seconds_ago=60)
    # The paused pod's old view: acquired five hours ago, before b4k-b took over.
    LeaseTransition.objects.filter(pk=reused.pk).update(
        acquire_time=NOW - timedelta(hours=5), fencing_reused=True
    )

    periods = holder_timeline(lease, list(lease.transitions.all()), truncated=False, now=NOW)

    assert [(p.holder, p.duration) for p in periods] == [
        ("b4k-a", ""),
        ("b4k-b", "9 min"),
        ("b4k-a", "60 s"),
    ]
    assert periods[1].end is not None and periods[2].start is not None
    assert periods[1].end.iso == periods[2].start.iso
