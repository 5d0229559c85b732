"""Leases messages outside the pages in Korean: the add_kube_cluster command's output and
refusals, the kubeconfig safety check, the filter form and the model labels. Field names,
API terms and the supplier's names stay as written."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import translation

from fakes.kube import kubeconfig_document
from leases.forms import LeaseFilterForm
from leases.kubeconfig import KubeconfigRefused, parse_kubeconfig
from leases.models import LeaseClass, LeaseState, ResourceWatchState

pytestmark = pytest.mark.django_db

SECRET_TOKEN = "kubeconfig-token-7d1e"


@pytest.fixture
def kubeconfig_file(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    document = kubeconfig_document("https://10.1.2.3:6443", token=SECRET_TOKEN, context_name="prod")
    path.write_text(yaml.safe_dump(document))
    return path


def test_add_kube_cluster_speaks_korean_and_names_the_cluster_as_given(
    kubeconfig_file: Path,
) -> None:
    out = StringIO()
    with translation.override("ko"):
        call_command("add_kube_cluster", "prod", "--kubeconfig", str(kubeconfig_file), stdout=out)
        with pytest.raises(CommandError) as refused:
            call_command(
                "add_kube_cluster", "prod", "--kubeconfig", str(kubeconfig_file), stdout=out
            )
    assert "클러스터 'prod'을(를) 추가했습니다" in out.getvalue()
    assert str(refused.value) == "이름이 'prod'인 클러스터가 이미 있습니다(--replace를 사용하세요)."
    assert SECRET_TOKEN not in out.getvalue() + str(refused.value)


def test_kubeconfig_refusal_in_korean_keeps_the_field_path_and_never_the_value() -> None:
    document = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://10.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"exec": {"command": "/bin/" + SECRET_TOKEN}}}],
    }
    with translation.override("ko"), pytest.raises(KubeconfigRefused) as refused:
        parse_kubeconfig(yaml.safe_dump(document))
    message = str(refused.value)
    assert message.startswith("users[u].user.exec: 대시보드 워커에서 프로그램을 실행합니다.")
    assert "그래서 거부됩니다." in message and "`token`" in message
    assert SECRET_TOKEN not in message


def test_filter_form_and_model_labels_follow_the_active_language() -> None:
    with translation.override("ko"):
        form = LeaseFilterForm({})
        assert str(form.fields["state"].label) == "상태"
        assert dict(form.fields["state"].choices)[""] == "모든 상태"
        assert (str(LeaseState.EXPIRED.label), str(LeaseClass.NODE_HEARTBEAT.label)) == (
            "만료됨",
            "노드 하트비트",
        )
        assert str(ResourceWatchState.FORBIDDEN.label) == "권한 없음(RBAC)"
    assert str(LeaseState.EXPIRED.label) == "expired"
