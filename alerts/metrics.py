"""Prometheus series for alerts, read from the database at scrape time (any web replica)."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from alerts.queries import alert_metrics
from dashboard.metrics import DatabaseCollector

PREFIX = "lease_dashboard_alerts"


class AlertCollector(DatabaseCollector):
    up_metric = f"{PREFIX}_metrics_up"
    up_help = "1 when the alert series below could be read."

    def collect_from_database(self) -> Iterable[Metric]:
        metrics = alert_metrics(timezone.now())

        incidents = GaugeMetricFamily(
            f"{PREFIX}_open_incidents",
            "Open (firing) incidents by rule and severity.",
            labels=["rule", "severity"],
        )
        for (rule, severity), count in sorted(metrics.open_incidents.items()):
            incidents.add_metric([rule, severity], count)
        yield incidents

        notifications = GaugeMetricFamily(
            f"{PREFIX}_notifications",
            "Alert e-mails by delivery state (pending includes those waiting to be retried).",
            labels=["state"],
        )
        for state, count in sorted(metrics.notifications.items()):
            notifications.add_metric([state], count)
        yield notifications

        age = GaugeMetricFamily(
            f"{PREFIX}_evaluation_age_seconds",
            "Seconds since the alert rules were last evaluated (-1: never).",
        )
        seconds = metrics.evaluation_age_seconds
        age.add_metric([], -1.0 if seconds is None else seconds)
        yield age

        oldest = GaugeMetricFamily(
            f"{PREFIX}_oldest_unsent_seconds",
            "Age of the oldest alert e-mail not yet sent (0: none waiting).",
        )
        oldest.add_metric([], metrics.oldest_unsent_seconds or 0.0)
        yield oldest

        retrying = GaugeMetricFamily(
            f"{PREFIX}_notifications_retrying",
            "Alert messages waiting for another attempt after at least one failed.",
        )
        retrying.add_metric([], metrics.retrying)
        yield retrying

        failed = GaugeMetricFamily(
            f"{PREFIX}_notifications_failed_last_hour",
            "Alert messages given up (failed) whose last attempt was due in the last hour.",
        )
        failed.add_metric([], metrics.failed_last_hour)
        yield failed


_registered = False


def register() -> None:
    """Add the collector to the dashboard's registry, once per process."""
    global _registered
    if _registered:
        return
    from dashboard.metrics import register_collector

    register_collector(AlertCollector())
    _registered = True
