"""The Leases page and the lease_flapping rule agree on what flaps, whatever an admin sets.

Both read one policy (`dashboard.flapping`): the settings' defaults, overridden by the
threshold and window on the lease_flapping AlertRule.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from alerts.models import AlertRule, Incident, IncidentState, Rule
from dashboard.flapping import FlapPolicy, flap_policy
from leases.models import Lease
from tests.alerts.conftest import Clock, evaluate
from tests.leases.factories import make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db


def flapping_on_page(client: Client) -> set[str]:
    """Lease names the Leases page's flapping filter lists."""
    response = client.get("/leases/?flapping=true")
    assert response.status_code == 200
    body = response.content.decode().split('<table class="table compact leases">', 1)[1]
    return set(re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', body))


def flapping_incidents() -> set[str]:
    keys = Incident.objects.filter(
        rule=Rule.LEASE_FLAPPING, state=IncidentState.FIRING
    ).values_list("key", flat=True)
    return {key.rsplit("/", 1)[1] for key in keys}


def with_changes(cluster: Any, name: str, seconds_ago: list[float]) -> Lease:
    lease = make_lease(cluster, name, namespace="ops", holder="pod-a")
    for ago in seconds_ago:
        make_transition(lease, "pod-a", "pod-b", seconds_ago=ago)
    return lease


def set_rule(threshold: int | None, window_seconds: int | None) -> None:
    AlertRule.objects.filter(rule=Rule.LEASE_FLAPPING).update(
        threshold=threshold, window_seconds=window_seconds
    )


def test_without_admin_values_the_policy_is_the_settings() -> None:
    set_rule(None, None)
    assert flap_policy() == FlapPolicy.configured()
    assert flap_policy().changes == settings.ALERT_FLAP_CHANGES
    assert flap_policy().window.total_seconds() == settings.ALERT_FLAP_WINDOW_SECONDS


def test_a_higher_admin_threshold_holds_back_page_and_rule_alike(
    clock: Clock, engineer_client: Client
) -> None:
    set_rule(5, None)
    cluster = make_cluster("prod")
    with_changes(cluster, "four-changes", [500, 400, 300, 200])
    with_changes(cluster, "five-changes", [500, 400, 300, 200, 100])

    evaluate(cluster)

    assert flapping_incidents() == {"five-changes"}
    assert flapping_on_page(engineer_client) == {"five-changes"}, "3 is only the default"


def test_an_admin_window_and_threshold_apply_to_page_and_rule_alike(
    clock: Clock, engineer_client: Client
) -> None:
    set_rule(2, 120)
    cluster = make_cluster("prod")
    with_changes(cluster, "two-quick-changes", [90, 30])
    # Three changes within the default ten minutes, but not two within two minutes.
    with_changes(cluster, "three-slow-changes", [540, 340, 140])

    evaluate(cluster)

    assert flapping_incidents() == {"two-quick-changes"}
    assert flapping_on_page(engineer_client) == {"two-quick-changes"}
    text = engineer_client.get("/leases/").content.decode()
    assert 'title="2 holder changes in the last 2 min">flapping</span>' in text
    overview = engineer_client.get("/").content.decode()
    flapping = overview.split("<h3>Flapping", 1)[1].split("</div>", 1)[0]
    assert "(≥ 2 holder changes in 2 min)" in flapping
    assert "ops/two-quick-changes" in flapping
    assert "ops/three-slow-changes" not in flapping
