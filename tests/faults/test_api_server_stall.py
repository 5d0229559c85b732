"""A frozen API server (SIGSTOP: connections accepted, nothing answered, open streams
silent) and a watch stream stuck while the server answers everything else.

Seen against a real kube-apiserver before: an 86 s stall raised twelve false lease_expired
incidents, all mailed, and the pages said "live" over frozen data. Now the data is stale
within 15 s, source_stale opens within 30 s, every lease reads unknown (never expired), and
once the server answers again the data is current within 5 s, equal to the server's, and
nothing else ever opened.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import orjson
import pytest
from django.test import Client
from django.utils import timezone

from alerts.models import Incident, IncidentState, Rule
from fakes.kube import FakeApiServer
from leases.models import LeaseState, WatchCoverage
from tests.faults.harness import (
    Figures,
    campaign,
    database_matches_server,
    eventually,
    false_incidents,
    false_notifications,
    is_current,
    row,
    states_now,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults]


def source_stale_firing() -> bool:
    return Incident.objects.filter(rule=Rule.SOURCE_STALE, state=IncidentState.FIRING).exists()


def source_stale_resolved() -> bool:
    return (
        Incident.objects.filter(rule=Rule.SOURCE_STALE).exists()
        and not Incident.objects.filter(rule=Rule.SOURCE_STALE)
        .exclude(state=IncidentState.RESOLVED)
        .exists()
    )


def api_leases(api: Client) -> list[dict[str, Any]]:
    response = api.get("/api/v1/leases")
    assert response.status_code == 200
    return list(orjson.loads(response.content)["results"])


def test_a_stalled_api_server_is_stale_within_15_s_and_raises_source_stale_not_lease_alarms(
    server: FakeApiServer, api: Client, admin_client: Client
) -> None:
    figures = Figures("stall 60 s")
    with campaign(server) as run:
        cluster = run.cluster
        started = time.monotonic()
        stalled_at = timezone.now()
        server.stall()
        figures["stale after"] = eventually(lambda: row(cluster).is_stale(), 15)

        # While it lasts: unknown everywhere, never expired, and no lease alarm.
        figures["source_stale after"] = (
            eventually(source_stale_firing, 30 - (time.monotonic() - started))
            + (figures.values["stale after"])
        )
        while time.monotonic() - started < 60:
            assert LeaseState.EXPIRED not in states_now(cluster)
            leases = api_leases(api)
            assert {lease["state"] for lease in leases} == {"unknown"}
            assert all(lease["stale"] for lease in leases)
            assert false_incidents() == []
            time.sleep(2)
        page = admin_client.get("/").content.decode()
        banner = page.index("Data from cluster prod is")
        assert banner < page.index('id="firing"'), "the stale banner must come first"
        assert "its watch is open, but the API server has not confirmed" in page or (
            "its watcher is not connected" in page
        )

        resumed_at = timezone.now()
        server.resume()
        figures["current after resume"] = eventually(
            lambda: is_current(cluster, since=resumed_at), 5
        )
        eventually(lambda: database_matches_server(server, cluster), 5)
        figures["source_stale resolved after resume"] = eventually(source_stale_resolved, 15)
        # A lease duration and more of current data after the stall: what it shows happened
        # (every holder renewed) is all a rule may judge.
        time.sleep(10)
        assert {lease["state"] for lease in api_leases(api)} == {"held"}
        # The frozen minute is unobserved time: the watched stretch ended at the last proof
        # before it and a new one began after it (availability leaves the gap out).
        (_, first_end), (second_start, _) = (
            WatchCoverage.objects.filter(cluster=cluster)
            .order_by("started_at")
            .values_list("started_at", "last_seen_at")
        )
        assert first_end <= stalled_at + timedelta(seconds=2)
        assert second_start >= resumed_at - timedelta(seconds=3)
    figures.print()
    assert false_incidents() == []
    assert false_notifications() == []


def test_a_watch_stream_stuck_while_the_server_answers_is_found_and_reconnected(
    server: FakeApiServer,
) -> None:
    figures = Figures("stuck lease stream")
    with campaign(server) as run:
        cluster = run.cluster
        opened = run.watcher.leases.watches_opened if run.watcher.leases else 0
        stuck_at = timezone.now()
        assert server.stall_watch_streams("leases") == 1
        # Lists, probes and new watches are answered: only that stream says nothing. The
        # probe sees the server move on without it and reconnects it.
        figures["reconnected after"] = eventually(
            lambda: run.watcher.leases is not None and run.watcher.leases.watches_opened > opened,
            15,
        )
        figures["current after"] = eventually(lambda: is_current(cluster, since=stuck_at), 10)
        eventually(lambda: database_matches_server(server, cluster), 5)
        assert run.watcher.probe.stuck_streams >= 1
        server.resume_watch_streams()
    figures.print()
    assert false_incidents() == []
    assert false_notifications() == []
