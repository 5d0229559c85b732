"""The alerts pages in Korean: incidents written by the rules read in the reader's language,
names stay as written (and escaped), and rows written before message ids still show."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import translation

from alerts import incident_actions
from alerts.models import Incident, IncidentEvent, Rule
from leases.models import Lease
from tests.alerts.conftest import Clock, evaluate
from tests.alerts.factories import make_incident
from tests.leases.factories import make_cluster, make_lease, make_many_leases

pytestmark = pytest.mark.django_db

KOREAN = {"HTTP_ACCEPT_LANGUAGE": "ko"}


@pytest.fixture
def client_in(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin", email="erin@example.org"))
    return client


def page(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def expired_scheduler(holder: str = "master-0_6f1c") -> Incident:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder=holder, renewed_ago=30)
    evaluate(cluster)
    return Incident.objects.get()


def test_the_alerts_page_reads_in_korean_with_names_as_written(
    clock: Clock, client_in: Client
) -> None:
    incident = expired_scheduler()

    html = page(client_in, "/alerts/", **KOREAN)

    assert '<html lang="ko"' in html
    assert "<h1>알림</h1>" in html
    assert "prod: kube-system/kube-scheduler Lease 만료됨" in html
    assert "심각" in html
    assert f'aria-label="인시던트 {incident.pk} 확인"' in html
    # Nothing of the page's own English is left in the incidents table.
    for english in ("lease expired", "so far", "Acknowledge", "Severity", "critical"):
        assert english not in html.split('id="incidents"', 1)[1], english
    # The same page in English for a reader without Accept-Language.
    assert "kube-system/kube-scheduler lease expired" in page(client_in, "/alerts/")


def test_the_incident_page_reads_in_korean_facts_timeline_and_resolution(
    clock: Clock, client_in: Client
) -> None:
    incident = expired_scheduler(holder="<b>master-0</b>")
    incident_actions.acknowledge_incident(incident.pk, incident_user(client_in))
    clock.advance(107)
    lease = incident_lease()
    lease.renew_time = clock.now()
    lease.expires_at = clock.now() + timedelta(seconds=15)
    lease.save()
    evaluate(lease.cluster)

    html = page(client_in, f"/alerts/{incident.pk}/", **KOREAN)

    assert f"인시던트 #{incident.pk}" in html
    assert "보유자(마지막 갱신자)" in html
    assert "마지막 갱신" in html
    # The holder is data: escaped, not translated.
    assert "&lt;b&gt;master-0&lt;/b&gt;" in html and "<b>master-0</b>" not in html
    assert "&lt;b&gt;master-0&lt;/b&gt;이(가) 갱신함" in html  # the resolution
    # Timeline entries written with message ids read in Korean, values as written.
    assert "발생: prod: kube-system/kube-scheduler Lease 만료됨; 조건 시작" in html
    assert "erin 님이 확인함: 더 이상 리마인더를 보내지 않습니다" in html
    assert "해결됨: &lt;b&gt;master-0&lt;/b&gt;이(가) 갱신함; 지속 시간 2분" in html
    # The stored English is unchanged (the API and logs read it).
    events = list(IncidentEvent.objects.filter(incident=incident).values_list("text", flat=True))
    assert "acknowledged by erin: no more reminders" in events
    assert "resolved: renewed by <b>master-0</b>; lasted 2 min" in events


def test_an_incident_from_before_message_ids_still_shows_as_written(
    clock: Clock, client_in: Client
) -> None:
    old = make_incident(
        title="kube-system/kube-scheduler lease expired",
        details={
            "facts": [{"label": "Holder", "text": "master-0"}, {"label": "Custom", "text": "x"}],
            "items_label": "Old items",
            "items": ["node-1"],
            "items_total": 1,
        },
    )
    IncidentEvent.objects.create(incident=old, at=clock.now(), kind="opened", text="opened: old")

    html = page(client_in, f"/alerts/{old.pk}/", **KOREAN)

    # No ids: the title and the timeline read as they were written, in English.
    assert "prod: kube-system/kube-scheduler lease expired" in html
    assert "opened: old" in html
    # Fact labels were always English message ids: a known one reads in Korean, an unknown
    # one as written.
    assert "보유자" in html
    assert "Custom" in html and "Old items" in html and "node-1" in html


def test_a_stored_message_whose_translation_does_not_fit_falls_back_to_the_english(
    clock: Clock,
) -> None:
    incident = make_incident(
        title="ops/x lease expired",
        details={
            # Values under a name the message does not use: no translation can fill it.
            "title_message": {"id": "%(lease)s lease expired", "args": {"where": "ops/x"}},
            "resolution_message": {"id": "renewed by %(holder)s", "args": {}},
            "facts": [
                {
                    "label": "Lease duration",
                    "text": "15 s",
                    "text_message": {"id": "%(seconds)s s", "args": {"secs": "15"}},
                }
            ],
        },
        resolution="renewed by node-1",
    )
    with translation.override("ko"):
        assert incident.display_title == "ops/x lease expired"
        assert incident.display_resolution == "renewed by node-1"
        assert incident.display_facts() == [{"label": "Lease 기간", "text": "15 s"}]
        assert incident.display_full_title == "prod: ops/x lease expired"


def test_a_title_with_a_list_of_problems_reads_each_in_korean() -> None:
    incident = Incident(
        title="NKS cluster unhealthy: health data STALE, API K8S_API_NOT_WORKING",
        cluster="prod",
        details={
            "title_message": {
                "id": "NKS cluster unhealthy: %(problems)s",
                "args": {},
                "lists": {
                    "problems": [
                        {"id": "health data %(freshness)s", "args": {"freshness": "STALE"}},
                        {"id": "API %(status)s", "args": {"status": "K8S_API_NOT_WORKING"}},
                    ]
                },
            }
        },
    )
    with translation.override("ko"):
        assert incident.display_title == (
            "NKS 클러스터 비정상: 헬스 데이터 STALE, API K8S_API_NOT_WORKING"
        )
    with translation.override("en"):
        assert incident.display_title == incident.title


def incident_user(client: Client) -> Any:
    return get_user_model().objects.get(username="erin")


def incident_lease() -> Lease:
    return Lease.objects.get(name="kube-scheduler")


def test_node_heartbeat_incident_counts_and_its_updates_read_in_korean(clock: Clock) -> None:
    cluster = make_cluster("prod")
    nodes = make_many_leases(cluster, 3)  # renewed 3 s before NOW, 40 s leases
    clock.advance(37)
    evaluate(cluster)
    clock.advance(5)
    Lease.objects.filter(pk__in=[lease.pk for lease in nodes[1:]]).update(
        renew_time=clock.now(), expires_at=clock.now() + timedelta(seconds=40)
    )
    evaluate(cluster)

    incident = Incident.objects.get(rule=Rule.NODE_HEARTBEATS_EXPIRED)
    update = IncidentEvent.objects.get(incident=incident, kind=IncidentEvent.Kind.UPDATED)
    assert incident.title == "1 node stopped heart-beating"
    with translation.override("ko"):
        assert incident.display_title == "노드 1개의 하트비트가 멈춤"
        assert incident.display_items_label == "kube-node-lease의 Lease가 만료된 노드"
        assert incident.display_items() == ["node-0000"]
        assert update.display_text == (
            "kube-node-lease의 Lease가 만료된 노드: 현재 1개; 사라짐 node-0001, node-0002"
        )
    assert update.text == (
        "Nodes whose lease in kube-node-lease expired: now 1; gone node-0001, node-0002"
    )
