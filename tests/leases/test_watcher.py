"""The watch pipeline against the fake API server over real HTTP, with the official client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from django.db import connection

from fakes.kube import FakeApiServer, kubeconfig_document
from leases.models import KubeCluster, Lease, LeaseCandidate, LeaseTransition
from leases.parse import parse_time
from leases.services import register_kube_cluster
from leases.watcher import Backoff, LeaseWatcher

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "sekret-token-4f9a"


def eventually(check: Callable[[], object], timeout: float = 8.0, message: str = "") -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(message or f"condition not met within {timeout} s")
        time.sleep(0.05)


def now_micro(offset: float = 0.0) -> str:
    moment = datetime.now(UTC) + timedelta(seconds=offset)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def leader_spec(holder: str, transitions: int = 0, duration: int = 15) -> dict[str, object]:
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": now_micro(),
        "renewTime": now_micro(),
        "leaseTransitions": transitions,
    }


def status(cluster: KubeCluster) -> KubeCluster:
    """The cluster's row as the watcher last wrote it."""
    return KubeCluster.objects.get(pk=cluster.pk)


def register(server: FakeApiServer, name: str = "test") -> KubeCluster:
    kubeconfig = yaml.safe_dump(kubeconfig_document(server.url, token=TOKEN, context_name=name))
    cluster, _ = register_kube_cluster(name, kubeconfig=kubeconfig)
    return cluster


class RunningWatcher:
    def __init__(self, cluster: KubeCluster, **options: Any) -> None:
        self.stop = threading.Event()
        settings: dict[str, Any] = {
            "flush_interval": 0.05,
            "candidates_interval": 0.5,
            "backoff": Backoff(base=0.2, maximum=0.5, auth_base=0.5, auth_maximum=1.0),
        }
        settings.update(options)
        self.watcher = LeaseWatcher(cluster.id, owner="test-watcher", stop=self.stop, **settings)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.watcher.run()
        finally:
            connection.close()  # this thread's session must not outlive the test database

    def __enter__(self) -> LeaseWatcher:
        self.thread.start()
        return self.watcher

    def __exit__(self, *exc: object) -> None:
        self.watcher._request_stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the watcher did not stop"


def database_matches_server(server: FakeApiServer, cluster: KubeCluster) -> bool:
    on_server = {
        (obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
        for obj in server.store.list_leases()
    }
    in_database = {
        (lease.namespace, lease.name): lease
        for lease in Lease.objects.filter(cluster=cluster).live()
    }
    assert set(in_database) == set(on_server)
    for key, obj in on_server.items():
        lease, spec = in_database[key], obj.get("spec", {})
        assert lease.holder == spec.get("holderIdentity", ""), key
        assert lease.renew_time == parse_time(spec.get("renewTime")), key
        assert lease.resource_version == obj["metadata"]["resourceVersion"], key
    return True


def test_lists_then_watches_until_the_database_equals_the_server(apiserver: FakeApiServer) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    apiserver.store.apply_lease("kube-node-lease", "worker-1", leader_spec("worker-1", duration=40))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: database_matches_server(apiserver, cluster))
        apiserver.store.apply_lease(
            "kube-node-lease", "worker-2", leader_spec("worker-2", duration=40)
        )
        apiserver.store.apply_lease(
            "kube-node-lease", "worker-1", leader_spec("worker-1", duration=40)
        )
        apiserver.store.delete_lease("kube-system", "kube-scheduler")
        eventually(lambda: database_matches_server(apiserver, cluster))
    scheduler = Lease.objects.get(name="kube-scheduler")
    assert scheduler.deleted_at is not None
    cluster.refresh_from_db()
    assert cluster.events_total >= 3
    assert cluster.resource_version
    assert cluster.last_error == ""


def test_holder_change_on_the_server_records_one_transition(apiserver: FakeApiServer) -> None:
    apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-a", 1))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.filter(holder="op-a").exists())
        for _ in range(5):  # renewals by the same holder: no transition
            apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-a", 1))
        apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-b", 2))
        eventually(lambda: LeaseTransition.objects.exists())
        time.sleep(0.3)
    transition = LeaseTransition.objects.get()
    assert (transition.from_holder, transition.to_holder, transition.missed) == ("op-a", "op-b", 0)
    assert transition.lease_transitions == 2


def test_410_on_resume_relists_without_losing_or_duplicating(apiserver: FakeApiServer) -> None:
    apiserver.forbid("nodes")  # the injected failures land on the Lease watch
    apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-a", 1))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.filter(holder="op-a").exists())
        apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-b", 2))
        eventually(lambda: LeaseTransition.objects.count() == 1)
        # The stream drops and the next attempts fail; meanwhile the lease changes and the
        # server compacts, so the resume from the old resourceVersion gets 410.
        apiserver.fail_next_requests(503, count=2)
        apiserver.end_watches()
        apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-c", 3))
        apiserver.store.apply_lease("operators", "other", leader_spec("x"))
        apiserver.store.compact()
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).relists_total >= 2)
        eventually(lambda: database_matches_server(apiserver, cluster))
        eventually(lambda: LeaseTransition.objects.count() == 2)
        apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-d", 4))
        eventually(lambda: LeaseTransition.objects.count() == 3)
        time.sleep(0.3)
    assert list(LeaseTransition.objects.values_list("to_holder", "missed")) == [
        ("op-b", 0),
        ("op-c", 0),
        ("op-d", 0),
    ]


def test_changes_made_while_no_watcher_ran_are_found_by_the_relist(
    apiserver: FakeApiServer,
) -> None:
    apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-a", 1))
    apiserver.store.apply_lease("operators", "gone-soon", leader_spec("x"))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: database_matches_server(apiserver, cluster))
    apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-d", 4))
    apiserver.store.delete_lease("operators", "gone-soon")
    apiserver.store.compact()
    with RunningWatcher(cluster):
        eventually(lambda: database_matches_server(apiserver, cluster))
        time.sleep(0.2)
    transition = LeaseTransition.objects.get()
    assert (transition.from_holder, transition.to_holder, transition.missed) == ("op-a", "op-d", 2)
    assert Lease.objects.get(name="gone-soon").deleted_at is not None


def test_a_stream_dropped_mid_line_resumes_from_the_last_event(apiserver: FakeApiServer) -> None:
    apiserver.forbid("nodes")  # one watch only: the dropped one is the Lease watch
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        assert apiserver.wait_for_watches(1)
        apiserver.drop_next_watches(1, after_events=2)
        apiserver.end_watches()  # the next watch is the one that drops
        assert apiserver.wait_for_watches(1)
        for number in range(6):
            apiserver.store.apply_lease(
                "kube-node-lease", f"node-{number}", leader_spec(f"node-{number}")
            )
        eventually(lambda: database_matches_server(apiserver, cluster))
    cluster.refresh_from_db()
    assert cluster.reconnects_total >= 1


def test_malformed_lines_and_unknown_event_types_are_skipped(apiserver: FakeApiServer) -> None:
    cluster = register(apiserver)
    with RunningWatcher(cluster) as watcher:
        assert apiserver.wait_for_watches(2)  # the Lease watch and the Node watch
        apiserver.inject_watch_line(b'{"type": "MODIFIED", "object": {"metadata": ')
        apiserver.inject_watch_line(b"<html>proxy error</html>")
        apiserver.inject_unknown_event("RESYNC")
        apiserver.inject_watch_line(b'{"type": "ADDED", "object": {"spec": {}}}')
        apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-1_b"))
        eventually(lambda: database_matches_server(apiserver, cluster))
        assert watcher.malformed_lines >= 3
        assert watcher.unknown_events == 1


def test_unauthorized_is_reported_in_words_and_retried_with_backoff(
    apiserver: FakeApiServer,
) -> None:
    apiserver.set_auth_failure(401)
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: "401 Unauthorized" in KubeCluster.objects.get(pk=cluster.pk).last_error)
        error = KubeCluster.objects.get(pk=cluster.pk).last_error
        time.sleep(1.0)
        attempts = len(apiserver.requests)
        apiserver.set_auth_failure(None)
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).connected)
    assert attempts <= 6, "the watcher must back off, not hammer the server"
    assert "invalid or expired" in error and TOKEN not in error
    # Recovered: an old error on the status would read as a current one.
    recovered = KubeCluster.objects.get(pk=cluster.pk)
    assert (recovered.last_error, recovered.last_error_at) == ("", None)


def test_forbidden_says_which_permission_is_missing(apiserver: FakeApiServer) -> None:
    apiserver.set_auth_failure(403)
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: "403 Forbidden" in KubeCluster.objects.get(pk=cluster.pk).last_error)
    error = KubeCluster.objects.get(pk=cluster.pk).last_error
    assert "get, list and watch on leases" in error and TOKEN not in error


def test_an_unreachable_server_is_reported_and_never_leaks_the_kubeconfig() -> None:
    kubeconfig = yaml.safe_dump(
        kubeconfig_document("http://127.0.0.1:9", token=TOKEN, context_name="down")
    )
    cluster, _ = register_kube_cluster("down", kubeconfig=kubeconfig)
    with RunningWatcher(cluster):
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).last_error)
    error = KubeCluster.objects.get(pk=cluster.pk).last_error
    assert "Could not connect to the API server at 127.0.0.1:9" in error
    assert TOKEN not in error


def test_html_and_huge_holders_are_stored_as_plain_text(apiserver: FakeApiServer) -> None:
    script = '<script>alert("owned")</script>\r\nX-Injected: yes'
    apiserver.store.apply_lease("operators", "evil", leader_spec(script))
    apiserver.store.apply_lease("operators", "huge", leader_spec("h" * 10_240))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.count() == 2)
    assert Lease.objects.get(name="evil").holder == script
    assert len(Lease.objects.get(name="huge").holder) == 10_240


def test_lease_candidates_are_synced(apiserver: FakeApiServer) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    apiserver.store.apply_candidate(
        "kube-system",
        "kube-scheduler-master-0",
        {
            "leaseName": "kube-scheduler",
            "binaryVersion": "1.33.4",
            "emulationVersion": "1.33.0",
            "strategy": "OldestEmulationVersion",
            "renewTime": now_micro(),
        },
    )
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: LeaseCandidate.objects.exists())
    candidate = LeaseCandidate.objects.get()
    assert (candidate.lease_name, candidate.binary_version) == ("kube-scheduler", "1.33.4")
    assert KubeCluster.objects.get(pk=cluster.pk).candidates_api == "coordination.k8s.io/v1beta1"


def test_a_server_without_candidates_is_not_an_error() -> None:
    server = FakeApiServer(token=TOKEN, candidate_versions=()).start()
    try:
        server.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
        cluster = register(server)
        with RunningWatcher(cluster):
            eventually(lambda: database_matches_server(server, cluster))
            time.sleep(0.7)
    finally:
        server.stop()
    cluster.refresh_from_db()
    assert (cluster.candidates_api, cluster.last_error) == ("", "")
    assert not LeaseCandidate.objects.exists()


def test_a_disabled_cluster_stops_its_watcher(apiserver: FakeApiServer) -> None:
    cluster = register(apiserver)
    runner = RunningWatcher(cluster)
    with runner:
        assert apiserver.wait_for_watches(1)
        KubeCluster.objects.filter(pk=cluster.pk).update(enabled=False)
        runner.thread.join(timeout=10)
        assert not runner.thread.is_alive()
    assert not KubeCluster.objects.get(pk=cluster.pk).connected


@pytest.fixture
def untrusted_tls_server(tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """An HTTPS server whose self-signed certificate no kubeconfig trusts."""
    import shutil
    import socket
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=not-the-api-server",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            try:
                with context.wrap_socket(client, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_an_untrusted_certificate_is_reported_as_a_tls_problem(untrusted_tls_server: str) -> None:
    kubeconfig = yaml.safe_dump(
        kubeconfig_document(untrusted_tls_server, token=TOKEN, context_name="tls")
    )
    cluster, _ = register_kube_cluster("tls", kubeconfig=kubeconfig)
    with RunningWatcher(cluster):
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).last_error)
    error = KubeCluster.objects.get(pk=cluster.pk).last_error
    assert error.startswith("TLS with the API server at 127.0.0.1:")
    assert "certificate" in error and TOKEN not in error
