"""PAGE_REFRESH_SECONDS: one pace for the live regions of every page."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.alerts.factories import make_account
from tests.leases.factories import make_cluster

pytestmark = pytest.mark.django_db


def test_every_live_region_refreshes_at_the_configured_pace(
    engineer_client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.PAGE_REFRESH_SECONDS = 7
    make_cluster("prod")
    make_account()

    for url in (
        "/",
        "/leases/",
        "/leases/clusters/",
        "/alerts/",
        "/clusters/",
        "/clusters/resizes/",
    ):
        text = engineer_client.get(url).content.decode()
        assert 'hx-trigger="every 7s"' in text, url
        assert 'hx-trigger="every 5s"' not in text, url
