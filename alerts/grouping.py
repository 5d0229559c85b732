"""Grouping: which clusters' incidents may be announced now, for mail and channels alike.

The first message about a cluster goes out at once; incidents of that cluster opened (or
resolved) within ALERT_GROUP_SECONDS after it wait for the window to end and then share one
message. Each destination keeps its own window: the mail's, and each channel's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.conf import settings

from alerts.models import AlertChannel, Incident, Notification, NotificationKind


def groups_due(
    kind: NotificationKind,
    incidents: Sequence[Incident],
    now: datetime,
    channel: AlertChannel | None = None,
) -> list[tuple[str, list[Incident]]]:
    """`incidents` by cluster, leaving out the clusters whose window since their last
    message of this kind (to `channel`, or by mail when None) has not ended."""
    by_group: dict[str, list[Incident]] = defaultdict(list)
    for incident in incidents:
        by_group[incident.cluster].append(incident)
    window = timedelta(seconds=settings.ALERT_GROUP_SECONDS)
    if not window:
        return list(by_group.items())
    destination = {"channel": channel} if channel is not None else {"channel__isnull": True}
    return [
        (group, members)
        for group, members in by_group.items()
        if not Notification.objects.filter(
            kind=kind, group=group, created_at__gt=now - window, **destination
        ).exists()
    ]
