from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from fakes.kube import kubeconfig_document
from leases.locks import watcher_lock
from leases.models import KubeCluster
from leases.services import claim_dispatch, clusters_without_watcher

pytestmark = pytest.mark.django_db

SECRET_TOKEN = "kubeconfig-token-7d1e"


@pytest.fixture
def kubeconfig_file(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    document = kubeconfig_document("https://10.1.2.3:6443", token=SECRET_TOKEN, context_name="prod")
    path.write_text(yaml.safe_dump(document))
    return path


def run(*args: str) -> str:
    out = StringIO()
    call_command("add_kube_cluster", *args, stdout=out)
    return out.getvalue()


def test_add_kube_cluster_stores_the_kubeconfig_and_never_prints_it(kubeconfig_file: Path) -> None:
    output = run("prod", "--kubeconfig", str(kubeconfig_file))
    cluster = KubeCluster.objects.get(name="prod")
    assert SECRET_TOKEN in cluster.kubeconfig
    assert SECRET_TOKEN not in output
    assert "Added cluster 'prod'" in output


def test_add_kube_cluster_refuses_an_unknown_context(kubeconfig_file: Path) -> None:
    with pytest.raises(CommandError, match="Context 'staging' is not in the kubeconfig") as error:
        run("prod", "--kubeconfig", str(kubeconfig_file), "--context", "staging")
    assert SECRET_TOKEN not in str(error.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [unclosed\n  token: " + SECRET_TOKEN, "not valid YAML"),
        ("just a string", "has no contexts"),
        ("contexts: []\nusers:\n- user: {token: " + SECRET_TOKEN + "}", "has no current-context"),
    ],
)
def test_add_kube_cluster_explains_a_bad_kubeconfig_without_quoting_it(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad"
    path.write_text(text)
    with pytest.raises(CommandError, match=message) as error:
        run("bad", "--kubeconfig", str(path))
    assert SECRET_TOKEN not in str(error.value)
    assert not KubeCluster.objects.exists()


def test_add_kube_cluster_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="Cannot read the kubeconfig"):
        run("x", "--kubeconfig", str(tmp_path / "missing"))


def test_add_kube_cluster_in_cluster_needs_no_file() -> None:
    run("self", "--in-cluster")
    assert KubeCluster.objects.get(name="self").source == KubeCluster.Source.IN_CLUSTER


def test_adding_twice_needs_replace(kubeconfig_file: Path) -> None:
    run("prod", "--kubeconfig", str(kubeconfig_file))
    with pytest.raises(CommandError, match="exists already"):
        run("prod", "--kubeconfig", str(kubeconfig_file))
    assert "Updated cluster 'prod'" in run(
        "prod", "--kubeconfig", str(kubeconfig_file), "--replace"
    )


def test_only_clusters_without_a_lock_holder_need_a_watcher() -> None:
    watched = KubeCluster.objects.create(name="watched")
    orphan = KubeCluster.objects.create(name="orphan")
    KubeCluster.objects.create(name="off", enabled=False)
    lock = watcher_lock(watched.id, owner="worker-1")
    assert lock.acquire()
    try:
        assert clusters_without_watcher() == [orphan.id]
    finally:
        lock.release()


def test_a_missing_watcher_is_dispatched_once_per_lock_ttl() -> None:
    cluster = KubeCluster.objects.create(name="c")
    assert claim_dispatch(cluster.id)
    assert not claim_dispatch(cluster.id)


def test_watch_leases_for_an_unknown_cluster_fails_clearly() -> None:
    with pytest.raises(CommandError, match="No cluster named 'nope'"):
        call_command("watch_leases", "--cluster", "nope", "--seconds", "1")
