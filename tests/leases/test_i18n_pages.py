"""The Leases pages in Korean: the Leases page and its table refresh, a lease page with its
availability strip, the groups and one group's page, a node page and the watchers page.

Each asserts Korean words from the leases catalog, the API's terms kept as the API spells
them (Lease, holderIdentity, renewTime, leaseDurationSeconds, resourceVersion, ...), and data
(names, identities) shown as written and escaped. The language comes from Accept-Language,
as a browser sends it; English stays the default without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import translation

from leases.models import KubeCluster, LeaseTransition, WatchCoverage
from leases.presenters.lease_table import lease_table, problems_legend
from leases.queries import LeaseFilters
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition
from tests.leases.group_factories import make_slot
from tests.nks.nodes import make_node

pytestmark = pytest.mark.django_db

KO = {"HTTP_ACCEPT_LANGUAGE": "ko"}
HOSTILE = '<script>alert("x")</script>'
ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
TABLE_REFRESH = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table", **KO}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def korean(client: Client, url: str, **headers: Any) -> str:
    response = client.get(url, **{**KO, **headers})
    assert response.status_code == 200, response.status_code
    assert response.headers.get("Content-Language") == "ko"
    return response.content.decode()


def assert_no_raw_hostile(text: str) -> None:
    assert "<script>alert" not in text


def test_leases_page_and_its_table_refresh_are_korean_with_names_kept(
    engineer_client: Client,
) -> None:
    cluster = make_cluster()
    lease = make_lease(cluster, "kube-scheduler", holder=HOSTILE)
    for seconds_ago in (30, 20, 10):
        make_transition(lease, "a", HOSTILE, seconds_ago=seconds_ago)
    make_lease(cluster, "gone-lease", renewed_ago=120)  # expired

    page = korean(engineer_client, "/leases/")
    region = korean(
        engineer_client, "/leases/", **{"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}
    )

    # The filter bar (Django template) and the table region (Jinja2), in Korean.
    for words in ("새로 고침 일시 정지", "이름 또는 보유자 포함", "플래핑만", "모든 클러스터"):
        assert words in page
    for text in (page, region):
        assert "감시자:" in text and "문제 우선" in text
        assert "data-state-pill>보유 중</span>" in text
        assert "data-state-pill>만료됨</span>" in text
        assert ">플래핑</span>" in text
        assert "컨트롤 플레인" in text  # the lease class label
        assert 'data-state="held"' in text  # the value stays as the code reads it
        assert "kube-scheduler" in text and ESCAPED in text
        assert_no_raw_hostile(text)
        assert "Problems first" not in text and "held</span>" not in text


def test_the_table_looks_words_up_per_language_not_once_per_process() -> None:
    make_lease(make_cluster(), "kube-scheduler", holder="master-0", renewed_ago=200)
    with translation.override("ko"):
        korean_rows = lease_table(LeaseFilters(), NOW).rows
        korean_legend = problems_legend(translation.get_language())
    with translation.override("en"):
        english_rows = lease_table(LeaseFilters(), NOW).rows
        english_legend = problems_legend(translation.get_language())
    assert (korean_rows[0].class_label, english_rows[0].class_label) == (
        "컨트롤 플레인",
        "control plane",
    )
    assert korean_legend.startswith("만료됨") and english_legend.startswith("expired")


@pytest.fixture
def election(engineer_client: Client) -> KubeCluster:
    cluster = make_cluster()
    WatchCoverage.objects.create(
        cluster=cluster, started_at=NOW - timedelta(days=2), last_seen_at=NOW
    )
    return cluster


def test_lease_page_with_its_availability_strip_is_korean_with_api_terms_kept(
    engineer_client: Client, election: KubeCluster
) -> None:
    lease = make_lease(
        election, "kube-controller-manager", holder=HOSTILE, created_at=NOW - timedelta(hours=30)
    )
    make_transition(lease, "master-0", HOSTILE, seconds_ago=600)

    text = korean(engineer_client, "/leases/prod/kube-system/kube-controller-manager/")

    for words in (
        "리더십 가용성",
        "보유자",
        "최근 24시간 동안의 보유자",
        "유효한 보유자",
        "리더 공백",
        "인계 시간 중앙값",
        "어노테이션",
        "감시자의 마지막 기록",
    ):
        assert words in text, words
    # API terms as the API spells them, beside the Korean labels.
    for term in (
        "holderIdentity",
        "renewTime",
        "acquireTime",
        "leaseDurationSeconds",
        "leaseTransitions",
        "resourceVersion",
        "Lease",
    ):
        assert term in text, term
    assert "data-state-pill>보유 중</span>" in text
    assert "15초" in text  # leaseDurationSeconds, exact, in Korean
    assert ESCAPED in text
    assert_no_raw_hostile(text)


def test_groups_and_group_page_are_korean_with_identities_escaped(
    engineer_client: Client, election: KubeCluster
) -> None:
    make_slot(election, "billing", 0, node_id=HOSTILE)
    slot = make_slot(election, "billing", 2)
    change = make_transition(slot, "a", slot.holder, seconds_ago=300)
    LeaseTransition.objects.filter(pk=change.pk).update(to_identity=HOSTILE)

    groups = korean(engineer_client, "/leases/groups/")
    group = korean(engineer_client, "/leases/clusters/prod/groups/apps/billing/")

    assert "리더 그룹" in groups and "그룹 1개." in groups and "빈 슬롯" in groups
    assert "billing" in groups
    for words in ("현재 보유된 슬롯", "관측된 슬롯", "최근 보유자 변경", "가용성", "슬롯 2"):
        assert words in group, words
    assert "1시간" in group and "7일" in group  # the availability windows in words
    assert 'data-window="1h"' in group  # the window's key stays as the API names it
    assert ESCAPED in group
    assert_no_raw_hostile(groups + group)


def test_node_page_is_korean_with_kubernetes_terms_and_names_kept(
    engineer_client: Client,
) -> None:
    from tests.nks.nodes import watched_cluster

    kube = watched_cluster("prod", now=NOW)
    make_node(kube, "prod-pool-a-1", nodegroup=HOSTILE, now=NOW)

    text = korean(engineer_client, reverse("leases:node", args=["prod", "prod-pool-a-1"]))

    for words in ("하트비트 Lease", "Ready 이력", "내부 주소", "테인트", "레이블"):
        assert words in text, words
    assert ">Ready</span>" in text  # the condition's name is Kubernetes'
    assert "lastTransitionTime" in text and "spec.providerID" in text
    assert "prod-pool-a-1" in text and ESCAPED in text
    assert_no_raw_hostile(text)


def test_watchers_page_is_korean_and_a_quiet_watcher_says_so_in_korean(
    engineer_client: Client,
) -> None:
    make_cluster("prod")
    make_cluster("staging", fresh=False, last_error=HOSTILE)

    text = korean(engineer_client, "/leases/clusters/")

    for words in ("Lease 감시자", "마지막 오류", "재연결", "재조회", "10초 동안 확인해 주지 않은"):
        assert words in text, words
    # The banner is one Korean sentence around the cluster's name and its error text.
    assert "클러스터 staging의 데이터가" in text
    assert ESCAPED in text
    assert "resourceVersion" in text and "LeaseCandidates" in text
    assert_no_raw_hostile(text)


def test_without_accept_language_the_pages_stay_english(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")
    text = engineer_client.get("/leases/").content.decode()
    assert "Pause refresh" in text and "data-state-pill>held</span>" in text
    assert "보유 중" not in text
