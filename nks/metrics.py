"""Prometheus series for NKS polling, cluster health and resizes, read at scrape time.

Polls run in Celery workers; their status lives on NksAccount rows, so any web replica
exports the same numbers. A handful of queries per scrape, one series per cluster/nodegroup.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dashboard.metrics import DatabaseCollector
from nks.models import IN_FLIGHT_STATES, Health, NksAccount, NksCluster, NksNodegroup, ResizeRequest

PREFIX = "lease_dashboard_nks"


class NksCollector(DatabaseCollector):
    up_metric = f"{PREFIX}_metrics_up"
    up_help = "1 when the NKS series below could be read from the database."

    def collect_from_database(self) -> Iterable[Metric]:
        now = timezone.now()
        poll_age = GaugeMetricFamily(
            f"{PREFIX}_account_last_success_age_seconds",
            "Seconds since the account was last polled successfully (-1: never).",
            labels=["account"],
        )
        failures = GaugeMetricFamily(
            f"{PREFIX}_account_consecutive_failures",
            "Polls of the account that failed in a row.",
            labels=["account"],
        )
        polls = CounterMetricFamily(
            f"{PREFIX}_account_polls", "Polls of the account.", labels=["account"]
        )
        poll_seconds = GaugeMetricFamily(
            f"{PREFIX}_account_poll_duration_seconds",
            "How long the last successful poll took.",
            labels=["account"],
        )
        for account in NksAccount.objects.filter(enabled=True).only(
            "name", "last_success_at", "consecutive_failures", "polls_total", "last_poll_seconds"
        ):
            labels = [account.name]
            age = (now - account.last_success_at).total_seconds() if account.last_success_at else -1
            poll_age.add_metric(labels, age)
            failures.add_metric(labels, account.consecutive_failures)
            polls.add_metric(labels, account.polls_total)
            if account.last_poll_seconds is not None:
                poll_seconds.add_metric(labels, account.last_poll_seconds)
        yield from (poll_age, failures, polls, poll_seconds)

        health = GaugeMetricFamily(
            f"{PREFIX}_cluster_health",
            "1 for the cluster's current verdict (unknown when its data is stale).",
            labels=["account", "cluster", "health"],
        )
        for cluster in (
            NksCluster.objects.live()
            .select_related("account")
            .only("name", "health", "polled_at", "gone_at", "account__name")
        ):
            verdict = cluster.effective_health(now)
            for value in Health:
                health.add_metric(
                    [cluster.account.name, cluster.name, value.value],
                    1 if value == verdict else 0,
                )
        yield health

        ready = GaugeMetricFamily(
            f"{PREFIX}_nodegroup_nodes",
            "Nodes of a worker nodegroup by readiness, as NKS's health report says.",
            labels=["cluster", "nodegroup", "ready"],
        )
        for cluster_name, name, ready_count, not_ready in (
            NksNodegroup.objects.filter(gone_at__isnull=True, cluster__gone_at__isnull=True)
            .exclude(ready__isnull=True)
            .values_list("cluster__name", "name", "ready", "not_ready")
        ):
            ready.add_metric([cluster_name, name, "true"], ready_count)
            ready.add_metric([cluster_name, name, "false"], not_ready or 0)
        yield ready

        in_flight = GaugeMetricFamily(
            f"{PREFIX}_resizes_in_flight",
            "Resize requests not finished yet, by state.",
            labels=["state"],
        )
        counts = dict(
            ResizeRequest.objects.filter(state__in=IN_FLIGHT_STATES)
            .values("state")
            .annotate(count=Count("id"))
            .values_list("state", "count")
        )
        for state in IN_FLIGHT_STATES:
            in_flight.add_metric([state.value], counts.get(state.value, 0))
        yield in_flight


_registered = False


def register() -> None:
    """Add the collector to the dashboard's registry, once per process."""
    global _registered
    if _registered:
        return
    from dashboard.metrics import register_collector

    register_collector(NksCollector())
    _registered = True
