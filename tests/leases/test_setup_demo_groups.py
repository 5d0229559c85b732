"""setup_demo records the demo's leader-k8s group sizes, which no lease carries."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from leases.models import LeaderGroup

pytestmark = pytest.mark.django_db


def test_setup_demo_records_the_demo_groups_expected_sizes_and_keeps_an_admins_change() -> None:
    call_command("setup_demo", stdout=StringIO())
    sizes = {
        (group.namespace, group.name): group.expected_size for group in LeaderGroup.objects.all()
    }
    assert sizes == {("jobs", "batch-workers"): 3, ("jobs", "nightly-export"): 2}

    LeaderGroup.objects.filter(name="batch-workers").update(expected_size=4)
    call_command("setup_demo", stdout=StringIO())
    assert LeaderGroup.objects.get(name="batch-workers").expected_size == 4
    assert LeaderGroup.objects.count() == 2
