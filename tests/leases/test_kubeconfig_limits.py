"""A kubeconfig nested thousands deep, or huge, is refused with words, never a 500.

PyYAML builds nested collections by recursion: 20,000 levels end in a RecursionError. The
bounds are read from the parser's events before anything is built. The Watch button's door
is tested with the fake NKS (tests/nks/test_watch_cluster_egress.py).
"""

from __future__ import annotations

import pytest
import yaml
from django.test import Client

from fakes.kube import kubeconfig_document
from leases import kube
from leases.kubeconfig import MAX_KUBECONFIG_CHARACTERS, KubeconfigRefused, parse_kubeconfig
from leases.models import KubeCluster

DEEP = {
    "flow": "a: " + "[" * 20_000 + "]" * 20_000,
    "block": "a:\n" + "".join(" " * level + "k:\n" for level in range(1, 1_200)),
    "maps": "a: " + "{b: " * 20_000 + "1" + "}" * 20_000,
}


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_a_kubeconfig_nested_thousands_deep_is_refused(text: str) -> None:
    with pytest.raises(KubeconfigRefused, match="nests lists and maps more than 32 levels"):
        parse_kubeconfig(text)


def test_a_huge_kubeconfig_is_refused_before_parsing() -> None:
    with pytest.raises(KubeconfigRefused, match="longer than 1,000,000 characters"):
        parse_kubeconfig("a: b\n" * (MAX_KUBECONFIG_CHARACTERS // 5 + 1))


def test_a_real_kubeconfig_with_extensions_is_within_bounds() -> None:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t", context_name="c")
    document["clusters"][0]["cluster"]["extensions"] = [
        {"name": "x", "extension": {"a": {"b": [{"c": [1, 2]}]}}}
    ]
    assert parse_kubeconfig(yaml.safe_dump(document)).data["current-context"] == "c"


def test_connect_refuses_a_deep_stored_kubeconfig() -> None:
    with pytest.raises(kube.KubeError, match="more than 32 levels") as error:
        kube.connect(kube.ClusterConfig(kubeconfig=DEEP["flow"]))
    assert error.value.kind == "config"


@pytest.mark.django_db
def test_admin_refuses_a_kubeconfig_nested_thousands_deep(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/leases/kubecluster/add/",
        {"name": "deep", "enabled": "on", "source": "kubeconfig", "kubeconfig": DEEP["flow"]},
    )
    assert response.status_code == 200, "the form must be shown again with the error"
    errors = response.context["adminform"].form.errors["kubeconfig"]
    assert "nests lists and maps more than 32 levels deep" in errors[0]
    assert not KubeCluster.objects.exists()
