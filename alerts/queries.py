"""Read-side queries of the alerts app: filters, silences, badge counts, metrics. Nothing writes.

Page presenters (`alerts.presenters`), the API, mail planning and delivery read through
these, so "which silence applies" has one answer everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet
from django.utils import timezone

from alerts.models import (
    AlertSubscription,
    DeliveryState,
    EvaluatorStatus,
    Incident,
    IncidentState,
    Notification,
    Rule,
    Severity,
    Silence,
)


@dataclass(frozen=True, slots=True)
class IncidentFilters:
    """The alerts page's filters (IncidentFilterForm's clean values), kept in its links."""

    state: str = ""  # "" = open ones, then recent resolved ones
    rule: str = ""
    severity: str = ""
    cluster: str = ""
    q: str = ""

    @property
    def active(self) -> bool:
        return bool(self.state or self.rule or self.severity or self.cluster or self.q)

    def params(self) -> dict[str, str]:
        values = {
            "state": self.state,
            "rule": self.rule,
            "severity": self.severity,
            "cluster": self.cluster,
            "q": self.q,
        }
        return {key: value for key, value in values.items() if value}

    def query_string(self) -> str:
        params = self.params()
        return f"?{urlencode(params)}" if params else ""


def filter_incidents(filters: IncidentFilters) -> QuerySet[Incident]:
    """Incidents matching the filters' rule, severity, cluster and text (not their state)."""
    incidents = Incident.objects.all()
    if filters.rule:
        incidents = incidents.filter(rule=filters.rule)
    if filters.severity:
        incidents = incidents.filter(severity=filters.severity)
    if filters.cluster:
        incidents = incidents.filter(cluster=filters.cluster)
    if filters.q:
        incidents = incidents.filter(Q(title__icontains=filters.q) | Q(key__icontains=filters.q))
    return incidents


def active_silences(now: datetime, keys: Iterable[str] | None = None) -> dict[str, Silence]:
    """Dedup key -> its active silence (of several, the one that lasts longest).

    `keys` narrows the query to those keys; None means every active silence.
    """
    silences = Silence.objects.active(now).select_related("created_by").order_by("ends_at")
    if keys is not None:
        wanted = set(keys)
        if not wanted:
            return {}
        silences = silences.filter(key__in=wanted)
    # Ordered by end: a later row replaces an earlier one, so the longest silence wins.
    return {silence.key: silence for silence in silences}


def incident_exists(incident_id: int) -> bool:
    """A shown incident (pending ones are not incidents yet)."""
    return Incident.objects.filter(pk=incident_id).exclude(state=IncidentState.PENDING).exists()


def subscription_of(user: Any) -> AlertSubscription | None:
    return AlertSubscription.objects.filter(user=user).first()


def attention_counts(now: datetime | None = None) -> dict[str, int]:
    """For the navigation badge, in one query: open incidents that nobody acknowledged and
    no silence covers (those still need someone), and how many of them are critical."""
    now = now or timezone.now()
    silenced = Silence.objects.active(now).filter(key=OuterRef("key"))
    counts = (
        Incident.objects.filter(state=IncidentState.FIRING, acknowledged_at__isnull=True)
        .exclude(Exists(silenced))
        .aggregate(
            count=Count("id"),
            critical=Count("id", filter=Q(severity=Severity.CRITICAL)),
        )
    )
    return {key: int(value or 0) for key, value in counts.items()}


@dataclass(slots=True)
class AlertMetrics:
    open_incidents: dict[tuple[str, str], int]
    notifications: dict[str, int]
    evaluation_age_seconds: float | None
    oldest_unsent_seconds: float | None
    # Waiting for another attempt after at least one failed: a channel or SMTP in trouble.
    retrying: int = 0
    # Given up (failed) with the last attempt due in the last FAILED_WINDOW.
    failed_last_hour: int = 0


# A failed row's next_attempt_at is when its last attempt was due: give or take the queue's
# delay, when it was given up. The failure gauge counts these, so an alert on it fires for an
# hour after a give-up and stops by itself, whatever retention later deletes.
FAILED_WINDOW = timedelta(hours=1)


def alert_metrics(now: datetime) -> AlertMetrics:
    """What the Prometheus collector exports: every rule x severity and state, zeros too."""
    open_counts = {(rule, severity): 0 for rule in Rule.values for severity in Severity.values}
    for row in (
        Incident.objects.filter(state=IncidentState.FIRING)
        .values("rule", "severity")
        .annotate(count=Count("id"))
        .order_by()
    ):
        open_counts[(row["rule"], row["severity"])] = row["count"]
    states = dict.fromkeys(DeliveryState.values, 0)
    failed_last_hour = 0
    # The same one GROUP BY as before: the recent failures are a conditional count in it.
    for row in (
        Notification.objects.values("state")
        .annotate(
            count=Count("id"),
            recent=Count(
                "id",
                filter=Q(state=DeliveryState.FAILED, next_attempt_at__gte=now - FAILED_WINDOW),
            ),
        )
        .order_by()
    ):
        states[row["state"]] = row["count"]
        failed_last_hour += row["recent"]
    unsent = Notification.objects.filter(
        state__in=[DeliveryState.PENDING, DeliveryState.SENDING]
    ).aggregate(
        oldest=Min("created_at"),
        retrying=Count("id", filter=Q(state=DeliveryState.PENDING, attempts__gt=0)),
    )
    oldest = unsent["oldest"]
    status = EvaluatorStatus.objects.filter(pk=1).values_list("last_finished_at", flat=True).first()
    return AlertMetrics(
        open_incidents=open_counts,
        notifications=states,
        evaluation_age_seconds=(now - status).total_seconds() if status else None,
        oldest_unsent_seconds=(now - oldest).total_seconds() if oldest else None,
        retrying=unsent["retrying"],
        failed_last_hour=failed_last_hour,
    )
