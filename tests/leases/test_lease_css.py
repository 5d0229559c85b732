"""A lease state's look is decided by one template filter, for both template engines."""

from __future__ import annotations

from django.template import engines

from leases.models import LeaseState
from leases.templatetags.lease_css import lease_state_pill


def test_every_lease_state_has_a_pill() -> None:
    pills = {state: lease_state_pill(state) for state in LeaseState}

    assert pills == {
        LeaseState.HELD: "pill-ok",
        LeaseState.EXPIRED: "pill-bad",
        LeaseState.RELEASED: "pill-quiet",
        LeaseState.UNKNOWN: "pill-warn",
    }


def test_django_and_jinja2_templates_reach_the_same_filter() -> None:
    django = engines["django"].from_string("{% load lease_css %}{{ state|lease_state_pill }}")
    jinja2 = engines["jinja2"].from_string("{{ state|lease_state_pill }}")

    assert django.render({"state": "expired"}) == jinja2.render({"state": "expired"}) == "pill-bad"
