"""The overview, top-first (issue 13): what is firing, then leases in trouble, then unhealthy
NKS, then the per-cluster summaries; every lease counted is listed or one link away."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alerts.models import Severity, Silence
from dashboard.presenters import FIRING_LIMIT
from tests.alerts.factories import make_account, make_incident, make_nks_cluster, make_nodegroup
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def page(client: Client, url: str = "/", **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def region(text: str, region_id: str) -> str:
    start = text.index(f'id="{region_id}"')
    return text[start:]


def _trouble() -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "node-3", namespace="kube-node-lease", renewed_ago=90, duration=40)
    # Not a node heartbeat: issue 13 saw "expired 2" with only the node listed.
    make_lease(cluster, "billing-leader", namespace="apps", renewed_ago=120, duration=15)
    flapper = make_lease(cluster, "flappy-leader", namespace="ops")
    for seconds_ago in (300, 200, 100, 50):
        make_transition(flapper, "x", "y", seconds_ago=seconds_ago)
    account = make_account()
    make_nks_cluster(account, "nks-ok")
    make_nks_cluster(
        account,
        "nks-broken",
        health="down",
        api="NOT_OK",
        api_status="K8S_API_NOT_WORKING",
        api_ok=False,
    )
    now = timezone.now()
    make_incident(
        "lease_expired:prod/apps/billing-leader",
        title="apps/billing-leader lease expired",
        severity=Severity.WARNING,
        opened_at=now - timedelta(minutes=1),
    )
    make_incident(
        "lease_expired:prod/kube-system/kube-controller-manager",
        title="kube-system/kube-controller-manager lease expired",
        severity=Severity.CRITICAL,
        opened_at=now - timedelta(minutes=5),
    )
    make_incident(
        "lease_expired:prod/kube-system/kube-scheduler",
        title="kube-system/kube-scheduler lease expired",
        severity=Severity.CRITICAL,
        opened_at=now - timedelta(minutes=2),
    )


def test_firing_comes_first_then_leases_then_nks_then_the_summaries(
    engineer_client: Client,
) -> None:
    _trouble()

    text = page(engineer_client)

    order = [
        text.index('id="firing"'),
        text.index('id="lease-problems"'),
        text.index('id="nks-overview"'),
        text.index('id="nks-nodegroups"'),
        text.index('id="lease-overview"'),
        text.index('id="workers"'),
    ]
    assert order == sorted(order)


def test_firing_lists_open_incidents_most_severe_and_newest_first_with_their_actions(
    engineer_client: Client,
) -> None:
    _trouble()

    firing = region(page(engineer_client), "firing").split("</section>", 1)[0]

    assert "No incidents" not in firing
    assert "3 open incidents" in firing
    titles = re.findall(r"prod: ([\w/-]+) lease expired", firing)
    assert titles == [
        "kube-system/kube-scheduler",  # critical, 2 min ago
        "kube-system/kube-controller-manager",  # critical, 5 min ago
        "apps/billing-leader",  # warning
    ]
    # The shared actions partial, coming back to the row on the overview.
    assert firing.count('data-action="acknowledge"') == 3
    assert firing.count('class="silence-presets"') == 3
    assert re.search(r'name="next" value="/#incident-\d+"', firing)


def test_an_acknowledged_or_silenced_incident_shows_it_in_place(
    engineer_client: Client, engineer
) -> None:  # type: ignore[no-untyped-def]
    incident = make_incident()
    incident.acknowledged_by = engineer
    incident.acknowledged_at = timezone.now()
    incident.save()
    Silence.objects.create(
        key=incident.key,
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(hours=1),
        created_by=engineer,
    )

    firing = region(page(engineer_client), "firing").split("</section>", 1)[0]

    assert "Acknowledged by erin" in firing
    assert "data-silenced" in firing
    assert 'data-action="unsilence"' in firing


def test_without_open_incidents_the_card_says_so(engineer_client: Client) -> None:
    firing = region(page(engineer_client), "firing").split("</section>", 1)[0]

    assert "No open incidents." in firing
    assert "data-incident=" not in firing


def test_every_expired_lease_is_listed_with_a_link_to_all_of_them(
    engineer_client: Client,
) -> None:
    _trouble()

    problems = region(page(engineer_client), "lease-problems").split("</section>", 1)[0]

    expired = problems.split('data-problem="expired"', 1)[1].split("</ul>", 1)[0]
    assert 'href="/leases/prod/kube-node-lease/node-3/"' in expired
    assert 'href="/leases/prod/apps/billing-leader/"' in expired
    assert "Expired (2)" in problems
    assert 'href="/leases/?state=expired"' in problems
    flapping = problems.split('data-problem="flapping"', 1)[1].split("</ul>", 1)[0]
    assert 'href="/leases/prod/ops/flappy-leader/"' in flapping
    assert "4 changes in 10 min" in flapping
    assert 'href="/leases/?flapping=true"' in problems


def test_more_expired_leases_than_listed_are_one_link_away(engineer_client: Client) -> None:
    cluster = make_cluster("prod")
    for number in range(12):
        make_lease(cluster, f"node-{number}", namespace="kube-node-lease", renewed_ago=90)

    problems = region(page(engineer_client), "lease-problems").split("</section>", 1)[0]

    assert problems.split('data-problem="expired"', 1)[1].split("</ul>", 1)[0].count("<li") == 10
    assert '<a href="/leases/?state=expired">all 12</a>' in problems


def test_unhealthy_nks_clusters_are_listed(engineer_client: Client) -> None:
    _trouble()

    nks = region(page(engineer_client), "nks-overview").split("</article>", 1)[0]

    assert "nks-broken" in nks
    assert "nks-ok" not in nks


def test_down_and_degraded_nodegroups_are_listed_with_links(engineer_client: Client) -> None:
    cluster = make_nks_cluster(make_account(), "nks-prod")
    make_nodegroup(cluster, "default-worker")
    make_nodegroup(cluster, "gpu", node_status="NOT_READY_NODE_EXIST", ready=2, not_ready=1)
    make_nodegroup(cluster, "batch", node_status="ALL_NODES_NOT_READY", ready=0, not_ready=3)

    nks = region(page(engineer_client), "nks-nodegroups").split("</section>", 1)[0]

    listed = nks.split('data-problem="nodegroups"', 1)[1].split("</ul>", 1)[0]
    assert listed.index("nks-prod/batch") < listed.index("nks-prod/gpu")  # down first
    assert "default-worker" not in listed
    assert f'href="/clusters/{cluster.uuid}/nodegroups/gpu/"' in listed


def test_each_region_refreshes_alone(engineer_client: Client) -> None:
    _trouble()

    firing = page(engineer_client, "/", HTTP_HX_TARGET="firing", **HTMX)
    problems = page(engineer_client, "/", HTTP_HX_TARGET="lease-problems", **HTMX)

    assert firing.lstrip().startswith('<section id="firing"')
    assert 'id="nav-alerts-badge"' in firing and 'hx-swap-oob="true"' in firing
    assert 'id="lease-problems"' not in firing
    assert problems.lstrip().startswith('<section id="lease-problems"')
    assert "kube-scheduler lease expired" not in problems


def test_every_region_pauses_with_the_one_switch(engineer_client: Client) -> None:
    text = page(engineer_client)

    for region_id in (
        "firing",
        "lease-problems",
        "nks-overview",
        "nks-nodegroups",
        "lease-overview",
        "workers",
    ):
        tag = re.search(rf'<[a-z]+ id="{region_id}"[^>]*>', text, re.S)
        assert tag and 'data-pause-with="lease-overview"' in tag.group(0), region_id


def test_the_firing_region_costs_a_fixed_number_of_queries(engineer_client: Client) -> None:
    _trouble()
    page(engineer_client, "/", HTTP_HX_TARGET="firing", **HTMX)  # session, user: warm
    with CaptureQueriesContext(connection) as few:
        page(engineer_client, "/", HTTP_HX_TARGET="firing", **HTMX)
    for number in range(8):
        make_incident(f"lease_expired:prod/apps/more-{number}", title=f"apps/more-{number}")
    with CaptureQueriesContext(connection) as many:
        page(engineer_client, "/", HTTP_HX_TARGET="firing", **HTMX)

    assert len(many) == len(few)
    assert len(few) <= 12


def test_a_storm_of_incidents_shows_the_first_ten_in_the_alerts_pages_order_and_links_to_all(
    engineer_client: Client,
) -> None:
    now = timezone.now()
    for number in range(FIRING_LIMIT + 4):
        make_incident(
            f"lease_expired:prod/apps/storm-{number:02d}",
            title=f"apps/storm-{number:02d} lease expired",
            severity=Severity.WARNING if number % 2 else Severity.CRITICAL,
            opened_at=now - timedelta(minutes=number),
        )
    firing = region(page(engineer_client, "/", HTTP_HX_TARGET="firing", **HTMX), "firing")
    shown = re.findall(r"prod: apps/(storm-\d+) lease expired", firing)
    # Critical ones first, newest first within each severity: what the alerts page shows.
    critical = [f"storm-{n:02d}" for n in range(0, FIRING_LIMIT + 4, 2)]
    warning = [f"storm-{n:02d}" for n in range(1, FIRING_LIMIT + 4, 2)]
    assert shown == (critical + warning)[:FIRING_LIMIT]
    assert f"All {FIRING_LIMIT + 4} open incidents" in " ".join(firing.split())


def test_the_lease_problems_region_costs_a_fixed_number_of_queries(
    engineer_client: Client,
) -> None:
    _trouble()
    page(engineer_client, "/", HTTP_HX_TARGET="lease-problems", **HTMX)
    with CaptureQueriesContext(connection) as few:
        page(engineer_client, "/", HTTP_HX_TARGET="lease-problems", **HTMX)
    cluster = make_cluster("staging")
    for number in range(6):
        make_lease(cluster, f"node-{number}", namespace="kube-node-lease", renewed_ago=90)

    with CaptureQueriesContext(connection) as many:
        page(engineer_client, "/", HTTP_HX_TARGET="lease-problems", **HTMX)

    assert len(many) == len(few)


def test_the_overview_reads_in_korean_with_the_incident_actions(engineer_client: Client) -> None:
    _trouble()

    text = page(engineer_client, "/", HTTP_ACCEPT_LANGUAGE="ko")

    assert '<html lang="ko">' in text
    firing = region(text, "firing").split("</section>", 1)[0]
    # The shared actions partial and the ages come in Korean inside the new region.
    assert ">Acknowledge<" not in firing
    assert "so far" not in firing
    problems = region(text, "lease-problems").split("</section>", 1)[0]
    assert "expired for" not in problems
    assert "Leases updated" not in problems


def test_the_new_overview_headings_read_in_korean(engineer_client: Client) -> None:
    _trouble()

    text = page(engineer_client, "/", HTTP_ACCEPT_LANGUAGE="ko")

    assert "지금 발생 중" in text
    assert "발생 중인 인시던트 3건" in text
    assert "만료되었거나 플래핑 중인 Lease" in text
    assert "만료됨 (2)" in text
    assert "본문으로 건너뛰기" in text


def test_the_skip_link_comes_first_and_leads_to_main(engineer_client: Client) -> None:
    text = page(engineer_client)

    body = text.split("<body", 1)[1]
    first_link = re.search(r"<a [^>]*>", body)
    assert first_link and 'class="skip-link" href="#content"' in first_link.group(0)
    assert '<main class="content" id="content" tabindex="-1">' in text
    assert 'id="refresh-announcer"' in text and 'aria-live="polite"' in text
