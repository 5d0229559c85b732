"""The watcher defects seen against a real kube-apiserver v1.24 (issue 10, section 0), each
checked over real HTTP against the fake API server: backoff after recovery, the reconnect
count, a banner for a cluster that never connected, and 1.24's identity leases. Signals and
LeaseCandidates have files of their own (test_watcher_signals.py, test_watcher_candidates.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from django.test import Client

from fakes.kube import FakeApiServer, kubeconfig_document
from leases.classify import classify_lease
from leases.models import Lease, LeaseClass
from leases.services import register_kube_cluster
from leases.watcher import Backoff
from tests.leases.test_watcher import (
    TOKEN,
    RunningWatcher,
    database_matches_server,
    eventually,
    leader_spec,
    register,
    status,
)

pytestmark = pytest.mark.django_db(transaction=True)

WATCH_PATH = "/apis/coordination.k8s.io/v1/leases"


APISERVER_BOOKMARK_INTERVAL = 0.2


def watches_opened(server: FakeApiServer) -> int:
    return sum(
        1
        for record in server.requests
        if record.path == WATCH_PATH
        and record.query.get("watch") == "true"
        and record.status == 200
    )


def seconds_to_resume_after_one_failure(server: FakeApiServer) -> float:
    """End the open watch, fail the resume once, and time how long until a watch is open."""
    before = watches_opened(server)
    server.fail_next_requests(503, count=1)
    started = time.monotonic()
    server.end_watches()
    eventually(lambda: watches_opened(server) > before, timeout=15)
    return time.monotonic() - started


# A backoff that an outage of six failures pushes to 3.2 s and more: a delay that was not
# reset after the recovery is easy to tell from the 0.1 s of a reset one.
def slow_backoff() -> Backoff:
    return Backoff(base=0.1, maximum=30.0, auth_base=0.1, auth_maximum=30.0)


# --- 1. Backoff ----------------------------------------------------------------------------


def test_a_successful_list_resets_the_retry_delay(apiserver: FakeApiServer) -> None:
    apiserver.forbid("nodes")  # the injected failures land on the Lease watch
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    cluster = register(apiserver)
    # The outage: the first lists fail, the delays double (0.1, 0.2 … 3.2 s).
    apiserver.fail_next_requests(503, count=6)
    with RunningWatcher(cluster, backoff=slow_backoff(), candidates_interval=600) as watcher:
        eventually(lambda: watches_opened(apiserver) >= 1, timeout=20)
        assert watcher.backoff.failures == 0
        assert seconds_to_resume_after_one_failure(apiserver) < 1.5


def test_a_stream_that_delivered_events_resets_the_retry_delay(apiserver: FakeApiServer) -> None:
    apiserver.forbid("nodes")  # the injected failures land on the Lease watch
    cluster = register(apiserver)
    with RunningWatcher(cluster, backoff=slow_backoff(), candidates_interval=600):
        eventually(lambda: watches_opened(apiserver) >= 1)
        # The outage hits the resume (no relist: the resourceVersion is still good), and
        # the watch that finally opens delivers bookmarks and a renewal.
        before = watches_opened(apiserver)
        apiserver.fail_next_requests(503, count=6)
        apiserver.end_watches()
        eventually(lambda: watches_opened(apiserver) > before, timeout=20)
        apiserver.store.apply_lease("kube-node-lease", "worker-1", leader_spec("worker-1"))
        eventually(lambda: Lease.objects.filter(name="worker-1").exists())
        assert seconds_to_resume_after_one_failure(apiserver) < 1.5
    assert status(cluster).relists_total == 1, "the resume needed no list"


def test_a_quiet_stream_that_stayed_open_resets_the_retry_delay() -> None:
    # Seen against a real kube-apiserver: a Node watch of a cluster whose Nodes do not
    # change delivers nothing (bookmarks come a minute apart), and after an outage its next
    # break waited 28 s. Here: no objects, no bookmarks, a stream proved after 1 s.
    server = FakeApiServer(token=TOKEN, bookmark_interval=600).start()
    try:
        server.forbid("nodes")  # the injected failures land on the Lease watch
        cluster = register(server)
        options = {"backoff": slow_backoff(), "candidates_interval": 600}
        with RunningWatcher(cluster, stream_proved_seconds=1.0, **options):
            eventually(lambda: watches_opened(server) >= 1)
            before = watches_opened(server)
            server.fail_next_requests(503, count=6)
            server.end_watches()
            eventually(lambda: watches_opened(server) > before, timeout=20)
            time.sleep(1.5)  # open, quiet, and past the 1 s that proves it
            assert seconds_to_resume_after_one_failure(server) < 1.5
    finally:
        server.stop()


# --- 2. Reconnect count --------------------------------------------------------------------


def test_reconnects_after_an_apiserver_restart_are_counted_and_exported(
    apiserver: FakeApiServer, client: Client, django_user_model: Any
) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    cluster = register(apiserver)
    restarted: FakeApiServer | None = None
    # The first watch breaks mid-line, as a connection does when the apiserver dies (the
    # Lease watch's: Nodes are forbidden here, so it is the only watch).
    apiserver.forbid("nodes")
    apiserver.drop_next_watches(1, after_events=1)
    try:
        with RunningWatcher(cluster):
            eventually(lambda: watches_opened(apiserver) >= 2)
            eventually(lambda: status(cluster).reconnects_total >= 1)
            # An outage: the server goes away, refuses connections, and comes back.
            port, store = apiserver.port, apiserver.store
            apiserver.stop()
            eventually(lambda: not status(cluster).connected)
            time.sleep(0.5)
            restarted = FakeApiServer(token=TOKEN, port=port, store=store).start()
            restarted.store.apply_lease(
                "kube-system", "kube-scheduler", leader_spec("master-1_b", 1)
            )
            eventually(lambda: status(cluster).connected, timeout=10)
            eventually(lambda: database_matches_server(restarted, cluster))
    finally:
        if restarted is not None:
            restarted.stop()
    # At least the one after the outage; a loaded machine may see one more break.
    reconnects = status(cluster).reconnects_total
    assert reconnects >= 2
    client.force_login(django_user_model.objects.create_user("erin"))
    metrics = client.get("/metrics").content.decode()
    assert f'lease_dashboard_watch_reconnects_total{{cluster="test"}} {reconnects}.0' in metrics


# --- 4. A cluster that never connected -----------------------------------------------------


def test_a_cluster_that_never_connected_shows_no_data_yet_not_zero_seconds(
    client: Client, django_user_model: Any
) -> None:
    kubeconfig = yaml.safe_dump(
        kubeconfig_document("http://127.0.0.1:9", token=TOKEN, context_name="down")
    )
    cluster, _ = register_kube_cluster("down", kubeconfig=kubeconfig)
    with RunningWatcher(cluster):
        eventually(lambda: status(cluster).last_error)
        time.sleep(0.5)  # ten flush intervals with nothing to flush
    row = status(cluster)
    assert row.last_flush_at is None, "a flush that wrote nothing vouches for nothing"
    client.force_login(django_user_model.objects.create_user("erin"))
    for url in ("/leases/clusters/", "/leases/", "/"):
        text = client.get(url).content.decode()
        assert "No data from cluster down yet — its watcher has not connected" in text, url
        assert "0 s old" not in text, url


def test_data_age_grows_while_the_watcher_is_disconnected(apiserver: FakeApiServer) -> None:
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: status(cluster).connected)
        eventually(lambda: status(cluster).last_flush_at is not None)
        apiserver.stop()
        eventually(lambda: not status(cluster).connected)
        last_flush = status(cluster).last_flush_at
        time.sleep(0.5)
        assert status(cluster).last_flush_at == last_flush, "nothing new was confirmed"


# --- 6. Identity leases of kube-apiserver 1.24 and 1.25 ------------------------------------

# As a real kube-apiserver v1.24.0 wrote it (kubectl get lease -n kube-system -o json).
APISERVER_124_LEASE = {
    "metadata": {
        "labels": {"k8s.io/component": "kube-apiserver"},
        "name": "kube-apiserver-7e16846d-f53c-4663-a0d3-c9743bbdb8b8",
        "namespace": "kube-system",
    },
    "spec": {
        "holderIdentity": "kube-apiserver-7e16846d-f53c-4663-a0d3-c9743bbdb8b8",
        "leaseDurationSeconds": 3600,
    },
}


@pytest.mark.parametrize(
    ("namespace", "name", "labels", "expected"),
    [
        (
            "kube-system",
            "kube-apiserver-7e16846d-f53c-4663-a0d3-c9743bbdb8b8",
            {"k8s.io/component": "kube-apiserver"},
            LeaseClass.APISERVER_IDENTITY,
        ),
        # The name alone (labels stripped by some tool) and the label alone are enough.
        (
            "kube-system",
            "kube-apiserver-7e16846d-f53c-4663-a0d3-c9743bbdb8b8",
            {},
            LeaseClass.APISERVER_IDENTITY,
        ),
        ("kube-system", "x", {"k8s.io/component": "kube-apiserver"}, LeaseClass.APISERVER_IDENTITY),
        # 1.26 and later.
        (
            "kube-system",
            "apiserver-abc",
            {"apiserver.kubernetes.io/identity": "kube-apiserver"},
            LeaseClass.APISERVER_IDENTITY,
        ),
        # Leader election that merely looks alike stays leader election.
        ("operators", "kube-apiserver-proxy-leader", {}, LeaseClass.LEADER_ELECTION),
        ("kube-system", "kube-apiserver-proxy-leader", {}, LeaseClass.LEADER_ELECTION),
        ("kube-system", "kube-scheduler", {}, LeaseClass.CONTROL_PLANE),
    ],
)
def test_apiserver_identity_leases_are_classified_by_label_or_uuid_name(
    namespace: str, name: str, labels: dict[str, str], expected: LeaseClass
) -> None:
    assert classify_lease(namespace, name, labels) == expected


def test_a_124_identity_lease_watched_from_the_server_is_apiserver_identity(
    apiserver: FakeApiServer,
) -> None:
    metadata = APISERVER_124_LEASE["metadata"]
    apiserver.store.apply_lease(
        metadata["namespace"],
        metadata["name"],
        dict(APISERVER_124_LEASE["spec"]),
        labels=dict(metadata["labels"]),
    )
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.filter(cluster=cluster).exists())
    assert Lease.objects.get().lease_class == LeaseClass.APISERVER_IDENTITY
