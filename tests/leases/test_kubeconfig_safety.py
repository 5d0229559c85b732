"""Kubeconfigs never run code or read the workers' files, at every door.

Two attacks, each through each door: a user whose `exec` plugin would write a file, and a
user whose `tokenFile` would read a secret file and send it to the API server. The doors:
`add_kube_cluster`, the admin form, the NKS one-click Lease source (the fake NKS hands out
the hostile kubeconfig, as a compromised NKS account or API could), and a watcher loading a
row written around the check. Each time the file stays unwritten, the fake API server
receives no request at all (so the secret never leaves), and the refusal names the field.
"""

from __future__ import annotations

import base64
import datetime
import time
import uuid
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from fakes.kube import FakeApiServer, kubeconfig_document
from fakes.nks import FakeNks
from leases import kube
from leases.models import KubeCluster
from leases.services import register_kube_cluster
from nks.models import NksCluster
from tests.leases.test_watcher import RunningWatcher, eventually
from tests.nks.conftest import fake_nks, nks_account, nks_settings, polled

__all__ = ["fake_nks", "nks_account", "nks_settings", "polled"]

USER = "prod-admin"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer(bookmark_interval=0.5).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def secret(tmp_path: Path) -> tuple[Path, str]:
    """A file on the worker holding a secret that must never leave the machine."""
    value = f"worker-secret-{uuid.uuid4().hex}"
    path = tmp_path / "secret-token"
    path.write_text(value)
    return path, value


def hostile_kubeconfig(server_url: str, user: dict[str, Any]) -> str:
    document = kubeconfig_document(server_url, token=None, context_name="prod")
    document["users"] = [{"name": USER, "user": user}]
    document["contexts"][0]["context"]["user"] = USER
    return yaml.safe_dump(document)


def exec_user(pwned: Path) -> dict[str, Any]:
    # A working plugin: were it run, it would also hand the SDK a token to send.
    credential = (
        '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
        '"status":{"token":"from-exec"}}'
    )
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "/bin/sh",
            "args": ["-c", f"touch {pwned}; echo '{credential}'"],
            "interactiveMode": "Never",
        }
    }


class Attack:
    """One hostile kubeconfig, what the refusal must name, and how to tell it did no harm."""

    def __init__(self, kind: str, tmp_path: Path, secret: tuple[Path, str]) -> None:
        self.kind = kind
        self.pwned = tmp_path / "pwned"
        self.secret_path, self.secret_value = secret
        if kind == "exec":
            self.user = exec_user(self.pwned)
            self.field = f"users[{USER}].user.exec"
            self.words = "runs a program on the dashboard's workers; it is refused"
        else:
            self.user = {"tokenFile": str(self.secret_path)}
            self.field = f"users[{USER}].user.tokenFile"
            self.words = "reads a file on the dashboard's workers; it is refused"

    def kubeconfig(self, server_url: str) -> str:
        return hostile_kubeconfig(server_url, self.user)

    def assert_refused(self, message: str, server: FakeApiServer) -> None:
        assert self.field in message and self.words in message, message
        assert self.secret_value not in message
        assert str(self.secret_path) not in message
        assert not self.pwned.exists(), "the exec plugin ran"
        assert server.requests == [], "a request reached the API server"


@pytest.fixture(params=["exec", "tokenFile"])
def attack(request: pytest.FixtureRequest, tmp_path: Path, secret: tuple[Path, str]) -> Attack:
    return Attack(request.param, tmp_path, secret)


def test_the_attacks_work_against_the_bare_sdk(attack: Attack, apiserver: FakeApiServer) -> None:
    """Without the check, the SDK runs the plugin or reads the file: the tests below matter."""
    configuration = k8s_client.Configuration()
    k8s_config.load_kube_config_from_dict(
        yaml.safe_load(attack.kubeconfig(apiserver.url)),
        client_configuration=configuration,
        persist_config=False,
    )
    token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
    if attack.kind == "exec":
        assert attack.pwned.exists()
    else:
        assert token == f"Bearer {attack.secret_value}"


# --- Each door ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_add_kube_cluster_refuses_the_kubeconfig(
    attack: Attack, apiserver: FakeApiServer, tmp_path: Path
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(attack.kubeconfig(apiserver.url))
    with pytest.raises(CommandError) as error:
        call_command("add_kube_cluster", "prod", "--kubeconfig", str(path), stdout=StringIO())
    attack.assert_refused(str(error.value), apiserver)
    assert "Use a static `token`" in str(error.value) or "`token` instead" in str(error.value)
    assert not KubeCluster.objects.exists()


@pytest.mark.django_db
def test_admin_refuses_the_kubeconfig(
    attack: Attack, apiserver: FakeApiServer, admin_client: Client
) -> None:
    response = admin_client.post(
        "/admin/leases/kubecluster/add/",
        {
            "name": "prod",
            "enabled": "on",
            "source": "kubeconfig",
            "kubeconfig": attack.kubeconfig(apiserver.url),
        },
    )
    assert response.status_code == 200, "the form must be shown again with the error"
    text = response.content.decode()
    assert "errorlist" in text
    attack.assert_refused(response.context["adminform"].form.errors["kubeconfig"][0], apiserver)
    assert not KubeCluster.objects.exists()


@pytest.mark.django_db
def test_the_nks_one_click_source_refuses_the_kubeconfig_nks_hands_out(
    attack: Attack,
    apiserver: FakeApiServer,
    polled: Any,
    fake_nks: FakeNks,
    client: Client,
    django_user_model: Any,
) -> None:
    # What GET /v1/clusters/{uuid}/config answers in its 'config' field.
    fake_nks.state.find_cluster("prod-api").kubeconfig = attack.kubeconfig(apiserver.url)
    operator = django_user_model.objects.create_user("olivia")
    operator.groups.add(Group.objects.get(name="operators"))
    client.force_login(operator)
    url = f"/clusters/{NksCluster.objects.get(name='prod-api').uuid}/watch-leases/"
    text = client.post(url, follow=True).content.decode()
    assert len(fake_nks.requests_seen(r"/v1/clusters/[^/]+/config")) == 1
    assert "The kubeconfig from NKS cannot be used:" in text
    attack.assert_refused(text.replace("&#x27;", "'"), apiserver)
    assert not KubeCluster.objects.exists()
    assert NksCluster.objects.get(name="prod-api").kube_cluster is None


@pytest.mark.django_db(transaction=True)
def test_a_watcher_refuses_a_stored_kubeconfig_written_around_the_check(
    attack: Attack, apiserver: FakeApiServer
) -> None:
    safe = yaml.safe_dump(kubeconfig_document(apiserver.url, token=None, context_name="prod"))
    cluster, _ = register_kube_cluster("prod", kubeconfig=safe)
    # As a row stored before the check existed, or by a path that skipped it.
    KubeCluster.objects.filter(pk=cluster.pk).update(kubeconfig=attack.kubeconfig(apiserver.url))
    with RunningWatcher(cluster):
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).last_error)
        time.sleep(0.5)  # time enough for a request, had one been made
    row = KubeCluster.objects.get(pk=cluster.pk)
    assert attack.kind in row.kubeconfig, "the hostile kubeconfig was stored"
    attack.assert_refused(row.last_error, apiserver)
    assert not row.connected


@pytest.mark.django_db
def test_connect_checks_a_stored_kubeconfig_again(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    cluster = KubeCluster.objects.create(name="old", kubeconfig="")
    KubeCluster.objects.filter(pk=cluster.pk).update(
        kubeconfig=hostile_kubeconfig("https://10.0.0.1:6443", exec_user(pwned))
    )
    with pytest.raises(kube.KubeError) as error:
        kube.connect(kube.ClusterConfig(kubeconfig=KubeCluster.objects.get().kubeconfig))
    assert error.value.kind == "config" and not error.value.retryable
    assert f"users[{USER}].user.exec runs a program" in error.value.message
    assert not pwned.exists()


# --- The checker, field by field ------------------------------------------------------------

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def checked(
    *,
    user: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
) -> kube.CheckedKubeconfig:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t0ken", context_name="c")
    document["users"] = [{"name": "u", "user": user if user is not None else {"token": "t"}}]
    document["clusters"][0]["cluster"].update(cluster or {})
    document["contexts"][0]["context"] = context or {"cluster": "c", "user": "u"}
    return kube.parse_kubeconfig(yaml.safe_dump(document))


REFUSED_USER_FIELDS = [
    ("auth-provider", {"name": "gcp", "config": {"cmd-path": "/bin/true"}}, "login plugin"),
    ("username", "admin", "basic authentication"),
    ("password", "hunter2", "basic authentication"),
    ("as", "system:admin", "impersonates"),
    ("as-groups", ["system:masters"], "impersonates"),
    ("as-uid", "0", "impersonates"),
    ("as-user-extra", {"scopes": ["all"]}, "impersonates"),
    ("client-certificate", "/etc/kubernetes/pki/admin.crt", "names a file"),
    ("client-key", "/etc/kubernetes/pki/admin.key", "names a file"),
    ("tokenFile", "/var/run/secrets/token", "reads a file"),
    ("exec", {"command": "/bin/true"}, "runs a program"),
    ("made-up-field", "unchecked-value", "not a field the dashboard accepts"),
]


@pytest.mark.parametrize(("field", "value", "words"), REFUSED_USER_FIELDS)
def test_refused_user_fields_are_named_with_what_to_use_instead(
    field: str, value: object, words: str
) -> None:
    with pytest.raises(kube.KubeError) as error:
        checked(user={"token": "t", field: value})
    message = error.value.message
    assert error.value.kind == "config"
    assert f"users[u].user.{field} " in message and words in message, message
    assert "instead" in message or "Allowed: token" in message
    if isinstance(value, str):
        assert value not in message.replace(f".{field} ", " "), "the value must not be quoted"


REFUSED_CLUSTER_FIELDS = [
    ("certificate-authority", "/etc/kubernetes/pki/ca.crt", "names a file", "-data instead"),
    ("proxy-url", "http://10.9.9.9:3128", "a host that is not the server", "HTTPS_PROXY"),
    ("made-up-field", "x", "not a field the dashboard accepts", "Allowed: server"),
]


@pytest.mark.parametrize(("field", "value", "words", "instead"), REFUSED_CLUSTER_FIELDS)
def test_refused_cluster_fields_are_named_with_what_to_use_instead(
    field: str, value: object, words: str, instead: str
) -> None:
    with pytest.raises(kube.KubeError) as error:
        checked(cluster={field: value})
    message = error.value.message
    assert f"clusters[c].cluster.{field} " in message and words in message, message
    assert instead in message


@pytest.mark.parametrize(
    ("section", "fields", "words"),
    [
        ("user", {"token": "line one\nline two"}, "users[u].user.token must be one line"),
        ("user", {"token": "tab\there"}, "users[u].user.token must be one line"),
        ("user", {"token": "tökén"}, "users[u].user.token must be one line"),
        ("user", {"client-certificate-data": CA}, "needs both client-certificate-data"),
        ("user", {"client-key-data": "not base64!"}, "client-key-data is not valid base64"),
        # The SDK computes `not value`: the string "false" would switch verification off.
        ("cluster", {"insecure-skip-tls-verify": "false"}, "must be true or false"),
        ("cluster", {"server": "file:///etc/passwd"}, "must be an http or https URL"),
        ("cluster", {"server": "https://admin:pw@10.0.0.1"}, "carries a user name or password"),
        ("cluster", {"server": "https://10.0.0.1:99999"}, "must be an http or https URL"),
        ("cluster", {"tls-server-name": ".evil"}, "must be a host name"),
        ("cluster", {"certificate-authority-data": "not base64!"}, "is not valid base64"),
        ("context", {"cluster": "c", "user": "u", "exec": "x"}, "contexts[c].context.exec"),
        ("context", {"cluster": "elsewhere"}, "must name a cluster defined"),
    ],
)
def test_malformed_values_are_refused_before_the_sdk_sees_them(
    section: str, fields: dict[str, Any], words: str
) -> None:
    with pytest.raises(kube.KubeError) as error:
        checked(**{section: fields})
    assert words in error.value.message, error.value.message
    assert "line two" not in error.value.message and "pw@" not in error.value.message


def test_every_entry_is_checked_not_only_the_current_contexts() -> None:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t", context_name="safe")
    document["users"].append({"name": "other", "user": {"exec": {"command": "/bin/sh"}}})
    with pytest.raises(kube.KubeError, match=r"users\[other\]\.user\.exec runs a program"):
        kube.parse_kubeconfig(yaml.safe_dump(document))


def test_every_refusal_is_listed_at_once() -> None:
    with pytest.raises(kube.KubeError) as error:
        checked(user={"exec": {}, "tokenFile": "/x"}, cluster={"proxy-url": "http://p:1"})
    message = error.value.message
    assert "user.exec" in message and "user.tokenFile" in message and "proxy-url" in message


def self_signed() -> tuple[str, str]:
    """A client certificate and key, base64-encoded PEM as `kubectl config view --raw` has."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lease-dashboard")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pem_certificate = certificate.public_bytes(serialization.Encoding.PEM)
    return base64.b64encode(pem_certificate).decode(), base64.b64encode(pem_key).decode()


def test_inline_data_kubeconfigs_are_accepted_and_connect() -> None:
    certificate, key = self_signed()
    result = checked(
        user={"client-certificate-data": certificate, "client-key-data": key},
        cluster={"certificate-authority-data": certificate, "tls-server-name": "api.example"},
    )
    assert result.warnings == ()
    api = kube.connect(kube.ClusterConfig(kubeconfig=yaml.safe_dump(result.data)))
    try:
        configuration = api.configuration
        assert configuration.host == "https://10.0.0.1:6443"
        assert Path(configuration.cert_file).read_bytes() == base64.b64decode(certificate)
        assert Path(configuration.ssl_ca_cert).read_bytes() == base64.b64decode(certificate)
        assert configuration.verify_ssl and configuration.tls_server_name == "api.example"
    finally:
        api.close()
    assert checked(user={"token": "eyJhbGciOi.payload.signature"}).warnings == ()


def test_an_empty_user_is_accepted() -> None:
    document = kubeconfig_document("http://127.0.0.1:8001", token=None, context_name="demo")
    document["users"][0]["user"] = None
    assert kube.parse_kubeconfig(yaml.safe_dump(document)).warnings == ()


# --- Warnings --------------------------------------------------------------------------------


@pytest.fixture
def engineer_client(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin"))
    return client


@pytest.mark.django_db
def test_insecure_skip_tls_verify_is_accepted_with_a_warning_on_the_watchers_page(
    engineer_client: Client,
) -> None:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t", context_name="lab")
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    cluster, _ = register_kube_cluster("lab", kubeconfig=yaml.safe_dump(document))
    assert "insecure-skip-tls-verify is true" in cluster.config_warning
    text = engineer_client.get("/leases/clusters/").content.decode()
    banner = text.split('data-config-warning="lab"', 1)[1].split("</p>", 1)[0]
    assert "clusters[lab].cluster.insecure-skip-tls-verify is true" in banner
    assert "certificate-authority-data instead" in banner


@pytest.mark.django_db
def test_a_safe_replacement_clears_the_warning(engineer_client: Client) -> None:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t", context_name="lab")
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    register_kube_cluster("lab", kubeconfig=yaml.safe_dump(document))
    del document["clusters"][0]["cluster"]["insecure-skip-tls-verify"]
    document["clusters"][0]["cluster"]["certificate-authority-data"] = CA
    cluster, _ = register_kube_cluster("lab", kubeconfig=yaml.safe_dump(document), replace=True)
    assert cluster.config_warning == ""
    assert "data-config-warning" not in engineer_client.get("/leases/clusters/").content.decode()


@pytest.mark.django_db
def test_the_admin_form_stores_the_warning(admin_client: Client) -> None:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t", context_name="lab")
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    response = admin_client.post(
        "/admin/leases/kubecluster/add/",
        {
            "name": "lab",
            "enabled": "on",
            "source": "kubeconfig",
            "kubeconfig": yaml.safe_dump(document),
        },
    )
    assert response.status_code == 302
    assert "insecure-skip-tls-verify" in KubeCluster.objects.get(name="lab").config_warning


def test_in_cluster_keeps_using_the_service_account(monkeypatch: pytest.MonkeyPatch) -> None:
    # The pod's own identity, from what Kubernetes sets up: no kubeconfig is checked (outside
    # a pod the SDK says so).
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kube.KubeError, match="cannot be used: Service host/port"):
        kube.connect(kube.ClusterConfig(in_cluster=True))


@pytest.mark.django_db
def test_add_kube_cluster_prints_the_warning(tmp_path: Path) -> None:
    document = kubeconfig_document("https://10.0.0.1:6443", token="t", context_name="lab")
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    stdout, stderr = StringIO(), StringIO()
    call_command("add_kube_cluster", "lab", "--kubeconfig", str(path), stdout=stdout, stderr=stderr)
    assert "Added cluster 'lab'" in stdout.getvalue()
    assert "Warning: clusters[lab].cluster.insecure-skip-tls-verify is true" in stderr.getvalue()


@pytest.mark.django_db
def test_admin_still_saves_a_row_whose_stored_kubeconfig_is_now_refused(
    tmp_path: Path, admin_client: Client
) -> None:
    """So it can be disabled; its watcher refuses the kubeconfig and says why."""
    cluster = KubeCluster.objects.create(name="old", kubeconfig="")
    hostile = hostile_kubeconfig("https://10.0.0.1:6443", exec_user(tmp_path / "pwned"))
    KubeCluster.objects.filter(pk=cluster.pk).update(kubeconfig=hostile)
    response = admin_client.post(
        f"/admin/leases/kubecluster/{cluster.pk}/change/",
        {"name": "old", "source": "kubeconfig", "kubeconfig": "", "context": ""},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert not KubeCluster.objects.get(pk=cluster.pk).enabled
    assert not (tmp_path / "pwned").exists()


@pytest.mark.django_db(transaction=True)
def test_a_watcher_shows_the_warning_of_a_row_stored_before_the_check(
    apiserver: FakeApiServer,
) -> None:
    document = kubeconfig_document(apiserver.url, token=None, context_name="old")
    cluster = KubeCluster.objects.create(name="old", kubeconfig=yaml.safe_dump(document))
    document["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    KubeCluster.objects.filter(pk=cluster.pk).update(kubeconfig=yaml.safe_dump(document))
    with RunningWatcher(cluster):
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).connected)
    row = KubeCluster.objects.get(pk=cluster.pk)
    assert "insecure-skip-tls-verify is true" in row.config_warning
    assert row.last_error == ""
