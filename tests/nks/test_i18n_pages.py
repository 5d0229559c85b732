"""NKS pages, the resize form, client errors and commands in Korean (issue 12).

A browser that asks for Korean gets every NKS page in Korean; NKS's own terms (nodegroup,
health_status, FRESH, CREATE_COMPLETE, ...) stay as NKS spells them, and names stay data:
as written, escaped. Without Accept-Language everything stays English.
"""

from __future__ import annotations

import html
import re

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import translation

from nks.client.errors import status_error
from nks.models import NksCluster, NksNodegroup, ResizeState
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup, make_resize
from tests.nks.refusals import assert_refused_back_on_the_page

pytestmark = pytest.mark.django_db

KO = {"HTTP_ACCEPT_LANGUAGE": "ko"}
HOSTILE_CLUSTER = "<b>prod</b>"
HOSTILE_GROUP = "<i>gpu</i>"


@pytest.fixture
def cluster() -> NksCluster:
    return make_nks_cluster(make_account(), name=HOSTILE_CLUSTER)


@pytest.fixture
def group(cluster: NksCluster) -> NksNodegroup:
    return make_nodegroup(cluster, HOSTILE_GROUP, node_count=3, ready=3)


def korean(client: Client, url: str, status: int = 200) -> str:
    response = client.get(url, **KO)
    assert response.status_code == status, (url, response.status_code)
    assert response["Content-Language"] == "ko"
    return response.content.decode()


def words(text: str) -> str:
    """The page's text without tags, entities decoded and spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def assert_names_escaped(text: str, *names: str) -> None:
    for name in names:
        assert name not in text
        assert html.escape(name, quote=True) in text or html.escape(name, quote=False) in text


def test_the_clusters_page_is_korean_with_nks_terms_and_names_as_written(
    operator_client: Client, group: NksNodegroup
) -> None:
    text = korean(operator_client, reverse("nks:index"))
    shown = words(text)
    assert "<h1>NKS 클러스터</h1>" in text
    assert "크기 조정 감사 기록" in shown and "새로 고침 일시 정지" in shown
    assert "<th>헬스</th>" in text and "<th>폴링</th>" in text
    assert ">정상</span>" in text, "the dashboard's verdict, translated"
    # NKS's values are shown as NKS sent them.
    assert ">FRESH</span>" in text and ">CREATE_COMPLETE</span>" in text
    assert "NKS가 보낸 그대로의 health_status(FRESH)" in text
    assert "클러스터는 NKS 헬스 데이터가 FRESH이고" in shown
    assert_names_escaped(text, HOSTILE_CLUSTER)
    assert "Cluster" not in shown and "Health data" not in shown


def test_the_cluster_page_is_korean(operator_client: Client, group: NksNodegroup) -> None:
    cluster = group.cluster
    text = korean(operator_client, reverse("nks:cluster", args=[cluster.uuid]))
    shown = words(text)
    for phrase in (
        "최근 24시간",
        "헬스(대시보드 판정)",
        "가용성 영역",
        "최근 작업",
        "기록된 작업이 없습니다.",
        "이 클러스터의 Lease와 Node 감시",
        "0초 전 업데이트됨.",
    ):
        assert phrase in shown, phrase
    # Field names as NKS spells them, and its status values, are kept.
    assert "health_status" in shown and "cluster.api_status" in shown
    assert "<th>Nodegroup</th>" in text and ">CREATE_COMPLETE</span>" in text
    assert_names_escaped(text, HOSTILE_CLUSTER, HOSTILE_GROUP)
    assert "Last 24 hours" not in shown and "Recent operations" not in shown


def test_the_nodegroup_page_and_its_resize_form_are_korean(
    operator_client: Client, group: NksNodegroup
) -> None:
    url = reverse("nks:nodegroup", args=[group.cluster.uuid, group.name])
    text = korean(operator_client, url)
    shown = words(text)
    for phrase in (
        "목표 노드 수",
        "삭제할 노드 (스케일 인 시)",
        "사유 (감사 기록에 남음)",
        "노드 삭제를 확인하려면 nodegroup 이름을 입력하세요",
        "이 클러스터는 감시하지 않아 노드를 선택할 수 없습니다.",
        "이력, 최근 24시간",
        "크기 조정 요청이 없습니다.",
    ):
        assert phrase in shown, phrase
    assert ">크기 조정</button>" in text
    assert_names_escaped(text, HOSTILE_CLUSTER, HOSTILE_GROUP)
    assert "Target node count" not in shown and "Resize requests" not in shown


def test_a_resize_form_error_is_korean_and_names_the_nodegroup_as_written(
    operator_client: Client, group: NksNodegroup
) -> None:
    url = reverse("nks:resize", args=[group.cluster.uuid, group.name])
    response = operator_client.post(url, {"node_count": 3, "reason": "x"}, follow=True, **KO)
    assert_refused_back_on_the_page(response)
    text = response.content.decode()
    assert f"{HOSTILE_GROUP}에는 이미 노드가 3개 있습니다. 변경 사항이 없습니다." in words(text)
    assert_names_escaped(text, HOSTILE_GROUP)

    response = operator_client.post(url, {"node_count": 2}, follow=True, **KO)
    assert "사유를 입력하세요. 사유는 감사 기록에 남습니다." in words(response.content.decode())


def test_the_resize_audit_is_korean(operator_client: Client, group: NksNodegroup) -> None:
    make_resize(group, ResizeState.FAILED, error="NKS said no", username="<u>mallory</u>")
    text = korean(operator_client, reverse("nks:resize_list"))
    shown = words(text)
    assert "<h1>크기 조정 감사 기록</h1>" in text
    assert "요청 1건." in shown
    assert 'data-resize-state="failed">실패</span>' in text
    assert "모든 클러스터" in shown and "모든 결과" in shown, "the filters' choices"
    assert "(웹 양식)" in shown, "the request's source"
    assert_names_escaped(text, HOSTILE_CLUSTER, HOSTILE_GROUP, "<u>mallory</u>")
    assert "Resize audit" not in shown and "request." not in shown


def test_a_resize_page_is_korean_and_keeps_the_exact_utc_time(
    operator_client: Client, group: NksNodegroup
) -> None:
    resize = make_resize(group, ResizeState.IN_PROGRESS, nks_called_at=None)
    text = korean(operator_client, reverse("nks:resize_detail", args=[resize.pk]))
    shown = words(text)
    for phrase in (
        "NKS가 nodegroup 크기를 조정하는 중입니다.",
        "이 페이지는 2초마다 진행 상황을 추적합니다.",
        "대기",
        "NKS로 전송",
        "nodegroup UPDATE_IN_PROGRESS 또는 이벤트 IN_PROGRESS",
        "아직 일치하는 이벤트 없음",
        "노드 3 → 5",
    ):
        assert phrase in shown, phrase
    assert 'data-resize-state="in_progress">진행 중</span>' in text
    stamp = resize.created_at.isoformat().replace("+00:00", "Z")
    assert f'title="{stamp}"' in text, "the exact UTC time stays in the tooltip"
    assert_names_escaped(text, HOSTILE_CLUSTER, HOSTILE_GROUP)
    assert "NKS is resizing the nodegroup." not in shown


def test_without_accept_language_the_pages_stay_english(
    operator_client: Client, group: NksNodegroup
) -> None:
    text = operator_client.get(reverse("nks:index")).content.decode()
    assert "<h1>NKS clusters</h1>" in text and ">healthy</span>" in text
    url = reverse("nks:nodegroup", args=[group.cluster.uuid, group.name])
    assert "Target node count" in operator_client.get(url).content.decode()


def test_an_nks_answer_an_engineer_reads_is_korean_with_http_terms_kept() -> None:
    request = httpx.Request("GET", "https://nks.example.com/v1/clusters")
    rejected = httpx.Response(401, json={"message": "token expired"}, request=request)
    with translation.override("ko"):
        error = status_error(
            "GET",
            "/v1/clusters",
            rejected,
            idempotent=True,
            fixed_token=True,
            redact_text=lambda text: text,
        )
    assert str(error) == (
        "NKS가 GET /v1/clusters 요청에 401 Unauthorized(으)로 응답했습니다: token expired "
        "(설정된 NKS 토큰이 거부되었습니다. 만료되었을 수 있습니다)"
    )
    unavailable = httpx.Response(503, request=request)
    with translation.override("ko"):
        error = status_error(
            "POST",
            "/v1/clusters/x/actions/resize",
            unavailable,
            idempotent=False,
            fixed_token=False,
            redact_text=lambda text: text,
        )
    assert "503 Service Unavailable" in str(error)
    assert str(error).endswith("다시 시도하기 전에 nodegroup 상태와 클러스터 이벤트를 확인하세요")


def test_a_management_command_speaks_the_active_language() -> None:
    with translation.override("ko"), pytest.raises(CommandError) as raised:
        call_command("poll_nks")
    assert str(raised.value) == "폴링할 NKS 계정이 없습니다. add_nks_account로 추가하세요."
