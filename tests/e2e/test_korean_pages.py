"""In Chromium, in Korean: the pages an on-call engineer uses most have no English left.

A browser set to Korean (its Accept-Language) in Seoul walks the Leases page, a lease page,
the NKS clusters page, a nodegroup page with its resize form (and a form error), the resize
audit, the alerts page and an incident page. On each, every run of Latin letters the page
shows must be an API term (Lease, holderIdentity, nodegroup, health_status, FRESH, ...) or
data: a name a cluster or NKS wrote, read back from the database. Anything else is English
that escaped translation. Screenshots of each page are kept for the closing note.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import models
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import expect

from alerts.models import Incident
from fakes.nks import FakeNks
from nks.models import NksCluster
from tests.alerts.conftest import evaluate
from tests.e2e.login import OPERATOR, log_in
from tests.leases.factories import make_cluster, make_lease

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path("/tmp/korean-pages")  # looked at by hand, not read back by tests

# What the issue keeps as the APIs spell it, and names of products and standards.
API_TERMS = {
    "Lease",
    "Leases",
    "holderIdentity",
    "renewTime",
    "acquireTime",
    "leaseDurationSeconds",
    "leaseTransitions",
    "resourceVersion",
    "nodegroup",
    "nodegroups",
    "health_status",
    "FRESH",
    "STALE",
    "ROTTEN",
    "NKS",
    "API",
    "Kubernetes",
    "Ready",
    "NotReady",
    "Node",
    "kubeconfig",
    "UTC",
    "KST",
    "English",  # the language switch names each language in its own words
    "ID",
    "UUID",
    "UID",
    "JSON",
    # Field and kind names of the Kubernetes and NKS APIs, shown beside their Korean names.
    "Nodegroup",
    "flavor",
    "creationTimestamp",
    "LeaseCandidate",
    "LeaseCandidates",
    # Lease libraries, by their own names: bluetape4k's leader-k8s, client-go, and
    # Kubernetes' coordinated leader election.
    "bluetape4k",
    "leader",
    "k8s",
    "client",
    "go",
    "coordinated",
    "election",
    # A setting's name and a path, quoted where a page says what to configure.
    "ALERT_EMAIL_TO",
    "alerts",
    "subscription",
}
# Exact times are shown as ISO 8601 (2026-12-01T07:53:30Z): its T and Z are not words.
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z")
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def data_words() -> set[str]:
    """Every word of every text the clusters and NKS wrote, as stored: names, identities,
    statuses, flavours. Read from the leases and nks tables, and incidents' keys."""
    words: set[str] = set()
    for label in ("leases", "nks"):
        for model in apps.get_app_config(label).get_models():
            fields = [
                field.attname
                for field in model._meta.concrete_fields
                if isinstance(field, models.CharField | models.TextField | models.JSONField)
                and not getattr(field, "secret", False)
                and field.name not in {"kubeconfig", "password", "token"}
            ]
            for row in model.objects.values_list(*fields):
                words.update(WORD.findall(" ".join(str(value) for value in row)))
    for key, cluster in Incident.objects.values_list("key", "cluster"):
        words.update(WORD.findall(f"{key} {cluster}"))
    # Who is signed in, and the zone in use (tz database names are names, not English).
    words.update(
        WORD.findall(" ".join(get_user_model().objects.values_list("username", flat=True)))
    )
    words.update(WORD.findall(settings.TIME_ZONE), ("Asia", "Seoul"))
    return words


def english_left(page: Any, allowed: set[str]) -> list[str]:
    text = ISO_TIME.sub(" ", page.locator("body").inner_text())
    return sorted({word for word in WORD.findall(text) if word not in allowed})


def test_the_on_call_pages_read_entirely_in_korean(  # type: ignore[no-untyped-def]
    live_server, korean_page, operator, demo_nks: FakeNks
) -> None:
    page = korean_page
    SCREENSHOTS.mkdir(exist_ok=True)
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", renewed_ago=90)
    make_lease(cluster, "kube-controller-manager", holder="master-1_9a2e")
    # An incident written by the rules (its title a message id with values).
    evaluate(cluster)
    incident = Incident.objects.filter(rule="lease_expired").latest("id")
    staging = NksCluster.objects.get(name="staging-web")
    nodegroup = staging.nodegroups.order_by("name").first()
    assert nodegroup is not None
    nodegroup_path = reverse("nks:nodegroup", args=[staging.uuid, nodegroup.name])
    allowed = API_TERMS | data_words()

    page.goto(f"{live_server.url}/login/?next=/leases/")
    log_in(page, OPERATOR)
    page.wait_for_url(f"{live_server.url}/leases/")
    expect(page.locator("html")).to_have_attribute("lang", "ko")

    visits = {
        "leases": "/leases/",
        "lease": "/leases/prod/kube-system/kube-scheduler/",
        "clusters": "/clusters/",
        "nodegroup": nodegroup_path,
        "resizes": "/clusters/resizes/",
        "alerts": "/alerts/",
        "incident": f"/alerts/{incident.pk}/",
    }
    left: dict[str, list[str]] = {}
    for name, path in visits.items():
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, (path, response)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
        (SCREENSHOTS / f"{name}.txt").write_text(page.locator("body").inner_text())
        if english := english_left(page, allowed):
            left[name] = english

    # A resize form error, on the nodegroup page: the error and its summary in Korean too.
    page.goto(f"{live_server.url}{nodegroup_path}")
    page.fill("#id_node_count", "999")
    # Past the browser's own check of max=, as a script or an old browser would send it.
    with page.expect_navigation():
        page.evaluate("document.querySelector('form[action$=\"/resize/\"]').submit()")
    page.wait_for_load_state("networkidle")
    expect(page.locator("#id_node_count")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "resize-error.png"), full_page=True)
    if english := english_left(page, allowed):
        left["resize error"] = english

    (SCREENSHOTS / "english-left.txt").write_text(repr(left))
    assert left == {}, left
    assert timezone.now() - incident.opened_at < timedelta(minutes=5)
